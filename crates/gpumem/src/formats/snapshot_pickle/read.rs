//! Reading a snapshot pickle: a pickle machine for what `pickle.dump` writes (protocol 2 to 5),
//! streaming the trace entries out as it meets them.

use super::SnapshotPickleError;
use super::opcodes::*;
use crate::formats::trace::{AllocTrace, EntryConverter, Stacks};
use crate::policy::allocator::StreamId;
use crate::policy::config::AllocatorConfig;
use crate::policy::history::{
    BlockInfo, BlockState, SegmentInfo, Snapshot, TraceAction, TraceEntry,
};
use crate::policy::stats::Pool;
use std::collections::HashMap;
use std::io;
use std::path::Path;

/// The largest string or integer the reader accepts: no snapshot field comes near it, and a
/// corrupt length must not make the reader ask for gigabytes.
const MAX_STRING_BYTES: u64 = 1 << 26;

/// How deeply containers may nest: a snapshot nests 6 levels (dict, list, entry, frames, frame);
/// a deeper pickle is a bomb, and dropping it would overflow the stack.
const MAX_NESTING: usize = 32;

/// Short strings kept decoded (keys, actions, states), at most this many and this long.
const MAX_INTERNED: usize = 4096;
/// See [`MAX_INTERNED`].
const MAX_INTERNED_LEN: usize = 64;

/// What [`read_snapshot`] found besides the trace entries it handed over.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotContents {
    /// The segments (every device's), with their blocks; `device` is each one's device index.
    pub segments: Vec<(usize, SegmentInfo)>,
    /// How many lists `device_traces` holds (one per device).
    pub devices: usize,
    /// Entries per device handed to the callback.
    pub entries: Vec<usize>,
    /// Entries whose action gpumem does not model (e.g. torch's `user_defined` annotations): left
    /// out.
    pub skipped: usize,
    /// `allocator_settings["PYTORCH_CUDA_ALLOC_CONF"]`, when the snapshot has it.
    pub alloc_conf: Option<String>,
}

/// One value on the pickle machine's stack. Containers of the trace are never built: a device's
/// list of entries hands each entry over as it is appended.
#[derive(Debug, Clone)]
enum Value {
    None,
    Bool(bool),
    Int(i128),
    Float,
    Str(std::rc::Rc<str>),
    List(Vec<Value>),
    Tuple,
    Dict(Vec<(Value, Value)>),
    /// The `device_traces` list, with how many device lists it has received.
    DeviceTraces(usize),
    /// One device's list of trace entries (streamed, never stored).
    Entries(usize),
    /// A container met again through the memo, or bytes: read past.
    Opaque,
    /// A frame dict (`filename`, `line`, `name`), by its id in [`Stacks`].
    Frame(u32),
    /// A list of frames, by its id in [`Stacks`].
    Stack(u32),
    Mark,
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float => "a float",
            Value::Str(_) => "a str",
            Value::List(_) | Value::DeviceTraces(_) | Value::Entries(_) => "a list",
            Value::Tuple => "a tuple",
            Value::Dict(_) => "a dict",
            Value::Opaque => "a shared object",
            Value::Frame(_) => "a frame",
            Value::Stack(_) => "a list of frames",
            Value::Mark => "a mark",
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

/// The pickle's memo, by index. Indices are small consecutive numbers, looked up once or more
/// per entry (every shared key and frame): a multiplicative hash serves them several times faster
/// than the default SipHash, and no memo key comes from anywhere but the file's own counters.
type Memo = HashMap<u64, Value, std::hash::BuildHasherDefault<IndexHasher>>;

/// Fibonacci hashing of a u64 (the memo's [`std::hash::Hasher`]).
#[derive(Debug, Default, Clone, Copy)]
struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Reads bytes and counts them, so that errors can say where.
struct Input<R> {
    inner: R,
    offset: u64,
}

impl<R: io::Read> Input<R> {
    fn bytes(&mut self, buf: &mut [u8]) -> Result<(), SnapshotPickleError> {
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(SnapshotPickleError::Truncated {
                    offset: self.offset,
                })
            }
            Err(source) => Err(SnapshotPickleError::Io {
                path: "the snapshot".into(),
                source,
            }),
        }
    }

    fn u8(&mut self) -> Result<u8, SnapshotPickleError> {
        let mut b = [0u8; 1];
        self.bytes(&mut b)?;
        Ok(b[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], SnapshotPickleError> {
        let mut b = [0u8; N];
        self.bytes(&mut b)?;
        Ok(b)
    }

    fn data(&mut self, len: u64, what: &str) -> Result<Vec<u8>, SnapshotPickleError> {
        if len > MAX_STRING_BYTES {
            return Err(SnapshotPickleError::BadPickle {
                offset: self.offset,
                reason: format!(
                    "{what} of {len} bytes is larger than any snapshot field ({MAX_STRING_BYTES} \
                     bytes at most): the file is corrupt"
                ),
            });
        }
        let mut buf = vec![0u8; len as usize];
        self.bytes(&mut buf)?;
        Ok(buf)
    }
}

/// Reads a snapshot pickle (PyTorch's `_dump_snapshot` or gpumem's [`dump_snapshot`](super::dump_snapshot)) from
/// `input`, handing each trace entry to `on_entry(device, entry)` as it is read; returns the
/// segments and counts. Entry totals (`allocated`, `reserved`) are 0: torch's entries carry none;
/// the entries' frames are not handed over ([`read_snapshot_stacks`] hands them).
pub fn read_snapshot(
    input: impl io::Read,
    mut on_entry: impl FnMut(usize, TraceEntry),
) -> Result<SnapshotContents, SnapshotPickleError> {
    read_snapshot_stacks(input, |device, entry, _| on_entry(device, entry)).map(|(c, _)| c)
}

/// [`read_snapshot`], handing each entry over with the id of its stack (its `frames`) in the
/// [`Stacks`] returned with the contents (the table grows as it is read: an id handed over is
/// resolved at the end).
pub fn read_snapshot_stacks(
    input: impl io::Read,
    mut on_entry: impl FnMut(usize, TraceEntry, u32),
) -> Result<(SnapshotContents, Stacks), SnapshotPickleError> {
    let mut stacks = Stacks::default();
    // Containers memoized while still being filled: (their place on the stack, memo index). When
    // one leaves the stack finished, a frame or a list of frames is memoized as its id.
    let mut pending: Vec<(usize, u64)> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut input = Input {
        inner: input,
        offset: 0,
    };
    let mut stack: Vec<Value> = Vec::new();
    // Only scalars are kept in the memo; containers come back as `Opaque`.
    let mut memo: Memo = Memo::default();
    let mut next_memo = 0u64;
    let mut interned: HashMap<Box<[u8]>, std::rc::Rc<str>> = HashMap::new();
    let mut entries: Vec<usize> = Vec::new();
    let mut skipped = 0usize;
    let bad = |offset: u64, reason: String| SnapshotPickleError::BadPickle { offset, reason };

    let first = input.u8().map_err(|e| match e {
        SnapshotPickleError::Truncated { .. } => bad(0, "the file is empty".into()),
        e => e,
    })?;
    if first != PROTO {
        return Err(bad(
            0,
            format!(
                "it starts with byte 0x{first:02x}, not a protocol 2+ header (0x80): is this a \
                 pickle written by torch.cuda.memory._dump_snapshot?"
            ),
        ));
    }
    let protocol = input.u8()?;
    if !(2..=5).contains(&protocol) {
        return Err(bad(
            1,
            format!("pickle protocol {protocol} (this reader reads protocols 2 to 5)"),
        ));
    }
    loop {
        let at = input.offset;
        let op = input.u8()?;
        let underflow = || bad(at, format!("opcode 0x{op:02x} finds the stack empty"));
        match op {
            STOP => break,
            FRAME => {
                input.le::<8>()?;
            }
            MARK => {
                marks.push(stack.len());
                stack.push(Value::Mark);
            }
            POP => {
                stack.pop().ok_or_else(underflow)?;
                forget_pending(&mut pending, stack.len());
            }
            POP_MARK => {
                let m = last_mark(&mut marks, &stack).ok_or_else(underflow)?;
                stack.truncate(m);
                forget_pending(&mut pending, m);
            }
            DUP => {
                let top = stack.last().ok_or_else(underflow)?.clone();
                stack.push(top);
            }
            NONE => stack.push(Value::None),
            NEWTRUE => stack.push(Value::Bool(true)),
            NEWFALSE => stack.push(Value::Bool(false)),
            BININT => stack.push(Value::Int(i32::from_le_bytes(input.le()?).into())),
            BININT1 => stack.push(Value::Int(input.u8()?.into())),
            BININT2 => stack.push(Value::Int(u16::from_le_bytes(input.le()?).into())),
            LONG1 | LONG4 => {
                let n = if op == LONG1 {
                    u64::from(input.u8()?)
                } else {
                    u64::from(u32::from_le_bytes(input.le()?))
                };
                if n > 16 {
                    return Err(bad(
                        at,
                        format!("an integer of {n} bytes: larger than any address or size"),
                    ));
                }
                let bytes = input.data(n, "an integer")?;
                let mut v: i128 = 0;
                for (i, b) in bytes.iter().enumerate() {
                    v |= i128::from(*b) << (8 * i);
                }
                if n > 0 && n < 16 && bytes[n as usize - 1] & 0x80 != 0 {
                    v -= 1i128 << (8 * n);
                }
                stack.push(Value::Int(v));
            }
            BINFLOAT => {
                input.le::<8>()?;
                stack.push(Value::Float);
            }
            SHORT_BINUNICODE => {
                // Keys and actions repeat in every entry: short strings are decoded once.
                let len = usize::from(input.u8()?);
                let mut buf = [0u8; 255];
                input.bytes(&mut buf[..len])?;
                let key = &buf[..len];
                let text = match interned.get(key) {
                    Some(text) => text.clone(),
                    None => {
                        let text: std::rc::Rc<str> = std::str::from_utf8(key)
                            .map_err(|_| bad(at, "a string that is not UTF-8".into()))?
                            .into();
                        if len <= MAX_INTERNED_LEN && interned.len() < MAX_INTERNED {
                            interned.insert(key.into(), text.clone());
                        }
                        text
                    }
                };
                stack.push(Value::Str(text));
            }
            BINUNICODE | BINUNICODE8 => {
                let len = if op == BINUNICODE {
                    u64::from(u32::from_le_bytes(input.le()?))
                } else {
                    u64::from_le_bytes(input.le()?)
                };
                let data = input.data(len, "a string")?;
                let text = String::from_utf8(data)
                    .map_err(|_| bad(at, "a string that is not UTF-8".into()))?;
                stack.push(Value::Str(text.into()));
            }
            SHORT_BINBYTES | BINBYTES | BINBYTES8 => {
                let len = match op {
                    SHORT_BINBYTES => u64::from(input.u8()?),
                    BINBYTES => u64::from(u32::from_le_bytes(input.le()?)),
                    _ => u64::from_le_bytes(input.le()?),
                };
                input.data(len, "a bytes object")?;
                stack.push(Value::Opaque);
            }
            EMPTY_DICT => stack.push(Value::Dict(Vec::new())),
            EMPTY_TUPLE => stack.push(Value::Tuple),
            EMPTY_SET => stack.push(Value::Opaque),
            EMPTY_LIST => {
                let list = list_role(&stack, last_mark(&mut marks, &stack));
                stack.push(list);
            }
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1 + 1);
                if stack.len() < n {
                    return Err(underflow());
                }
                stack.truncate(stack.len() - n);
                forget_pending(&mut pending, stack.len());
                stack.push(Value::Tuple);
            }
            TUPLE | FROZENSET => {
                let m = last_mark(&mut marks, &stack).ok_or_else(underflow)?;
                stack.truncate(m);
                forget_pending(&mut pending, m);
                stack.push(if op == TUPLE {
                    Value::Tuple
                } else {
                    Value::Opaque
                });
            }
            ADDITEMS => {
                let m = last_mark(&mut marks, &stack).ok_or_else(underflow)?;
                stack.truncate(m);
                forget_pending(&mut pending, m);
            }
            APPEND | APPENDS => {
                let (start, items) = if op == APPEND {
                    let item = stack.pop().ok_or_else(underflow)?;
                    (stack.len(), vec![item])
                } else {
                    let m = last_mark(&mut marks, &stack).ok_or_else(underflow)?;
                    let items = stack.split_off(m + 1);
                    stack.pop();
                    (m + 1, items)
                };
                let items = settle_all(items, start, &mut pending, &mut memo, &mut stacks);
                match stack.last_mut().ok_or_else(underflow)? {
                    Value::List(list) => {
                        check_nesting(&items).map_err(|r| bad(at, r))?;
                        list.extend(items)
                    }
                    Value::DeviceTraces(count) => *count += items.len(),
                    Value::Entries(device) => {
                        let device = *device;
                        if entries.len() <= device {
                            entries.resize(device + 1, 0);
                        }
                        for item in items {
                            let index = entries[device];
                            match trace_entry(&item).map_err(|reason| {
                                SnapshotPickleError::WrongSchema {
                                    reason: format!("device_traces[{device}][{index}]: {reason}"),
                                }
                            })? {
                                Some((entry, stack_id)) => {
                                    entries[device] += 1;
                                    on_entry(device, entry, stack_id);
                                }
                                None => skipped += 1,
                            }
                        }
                    }
                    Value::Opaque => {}
                    other => {
                        return Err(bad(at, format!("append to {}, not a list", other.kind())));
                    }
                }
            }
            SETITEM | SETITEMS => {
                let (start, items) = if op == SETITEM {
                    if stack.len() < 2 {
                        return Err(underflow());
                    }
                    (stack.len() - 2, stack.split_off(stack.len() - 2))
                } else {
                    let m = last_mark(&mut marks, &stack).ok_or_else(underflow)?;
                    let items = stack.split_off(m + 1);
                    stack.pop();
                    (m + 1, items)
                };
                if items.len() % 2 != 0 {
                    return Err(bad(at, "SETITEMS with a key and no value".into()));
                }
                let items = settle_all(items, start, &mut pending, &mut memo, &mut stacks);
                match stack.last_mut().ok_or_else(underflow)? {
                    Value::Dict(dict) => {
                        check_nesting(&items).map_err(|r| bad(at, r))?;
                        let mut it = items.into_iter();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            dict.push((k, v));
                        }
                    }
                    Value::Opaque => {}
                    other => {
                        return Err(bad(
                            at,
                            format!("set an item of {}, not a dict", other.kind()),
                        ));
                    }
                }
            }
            MEMOIZE | BINPUT | LONG_BINPUT => {
                let index = match op {
                    MEMOIZE => next_memo,
                    BINPUT => u64::from(input.u8()?),
                    _ => u64::from(u32::from_le_bytes(input.le()?)),
                };
                next_memo = next_memo.max(index + 1);
                match stack.last().ok_or_else(underflow)? {
                    v @ (Value::Str(_)
                    | Value::Int(_)
                    | Value::Float
                    | Value::Bool(_)
                    | Value::None
                    | Value::Frame(_)
                    | Value::Stack(_)) => {
                        memo.insert(index, v.clone());
                    }
                    Value::Dict(_) | Value::List(_) => {
                        memo.remove(&index);
                        pending.push((stack.len() - 1, index));
                    }
                    _ => {
                        memo.remove(&index);
                    }
                }
            }
            BINGET | LONG_BINGET => {
                let index = if op == BINGET {
                    u64::from(input.u8()?)
                } else {
                    u64::from(u32::from_le_bytes(input.le()?))
                };
                if index >= next_memo {
                    return Err(bad(at, format!("memo entry {index} was never stored")));
                }
                stack.push(memo.get(&index).cloned().unwrap_or(Value::Opaque));
            }
            other => {
                return Err(bad(
                    at,
                    format!(
                        "opcode 0x{other:02x} ({}) is not one pickle.dump writes for a snapshot \
                         (dicts, lists, tuples, numbers, strings)",
                        if other.is_ascii_graphic() {
                            format!("{:?}", other as char)
                        } else {
                            "binary".into()
                        }
                    ),
                ));
            }
        }
    }
    let top = match stack.as_slice() {
        [top] => top,
        _ => {
            return Err(bad(
                input.offset,
                format!("STOP with {} values on the stack, not one", stack.len()),
            ));
        }
    };
    Ok((snapshot_contents(top, entries, skipped)?, stacks))
}

/// Drops the pending memo entries of containers that left the stack unfinished or unused (at
/// places `from` and above).
fn forget_pending(pending: &mut Vec<(usize, u64)>, from: usize) {
    while pending.last().is_some_and(|&(at, _)| at >= from) {
        pending.pop();
    }
}

/// Items leaving the stack (from place `start`) into a container: frame dicts become frame ids
/// and lists of frames stack ids, and those that were memoized are remembered as such.
fn settle_all(
    items: Vec<Value>,
    start: usize,
    pending: &mut Vec<(usize, u64)>,
    memo: &mut Memo,
    stacks: &mut Stacks,
) -> Vec<Value> {
    let items: Vec<Value> = items.into_iter().map(|v| settle(v, stacks)).collect();
    while let Some(&(at, index)) = pending.last().filter(|&&(at, _)| at >= start) {
        pending.pop();
        match items.get(at - start) {
            Some(v @ (Value::Frame(_) | Value::Stack(_))) => {
                memo.insert(index, v.clone());
            }
            _ => {
                memo.remove(&index);
            }
        }
    }
    items
}

/// A finished frame dict as its frame id, a list of frames as its stack id, anything else as is.
fn settle(v: Value, stacks: &mut Stacks) -> Value {
    match &v {
        Value::Dict(_) => {
            if let (Some(Value::Str(filename)), Some(Value::Int(line)), Some(Value::Str(name))) =
                (v.get("filename"), v.get("line"), v.get("name"))
            {
                let frame = crate::policy::history::Frame {
                    filename: filename.to_string().into(),
                    line: (*line).clamp(0, i128::from(u64::MAX)) as u64,
                    name: name.to_string().into(),
                };
                return Value::Frame(stacks.frame_id(frame));
            }
            v
        }
        Value::List(items)
            if !items.is_empty() && items.iter().all(|i| matches!(i, Value::Frame(_))) =>
        {
            let ids: Vec<u32> = items
                .iter()
                .map(|i| match i {
                    Value::Frame(id) => *id,
                    _ => 0,
                })
                .collect();
            Value::Stack(stacks.stack_id(&ids))
        }
        _ => v,
    }
}

/// Refuses values nested deeper than [`MAX_NESTING`] (counted level by level, no recursion).
fn check_nesting(items: &[Value]) -> Result<(), String> {
    let mut level: Vec<&Value> = items
        .iter()
        .filter(|v| matches!(v, Value::List(_) | Value::Dict(_)))
        .collect();
    let mut depth = 1;
    while !level.is_empty() {
        if depth > MAX_NESTING {
            return Err(format!(
                "containers nested more than {MAX_NESTING} deep (a snapshot nests 6): not a \
                 snapshot, or a bomb of nested lists"
            ));
        }
        level = level
            .into_iter()
            .flat_map(|v| -> Box<dyn Iterator<Item = &Value> + '_> {
                match v {
                    Value::List(items) => Box::new(items.iter()),
                    Value::Dict(pairs) => Box::new(pairs.iter().flat_map(|(k, v)| [k, v])),
                    _ => Box::new(std::iter::empty()),
                }
            })
            .filter(|v| matches!(v, Value::List(_) | Value::Dict(_)))
            .collect();
        depth += 1;
    }
    Ok(())
}

/// The position of the topmost mark. `marks` holds the places where marks were pushed, newest
/// last; those the stack has since shrunk past are dropped here, so that finding the mark is not
/// a walk down a stack that may hold a million values.
fn last_mark(marks: &mut Vec<usize>, stack: &[Value]) -> Option<usize> {
    while let Some(&m) = marks.last() {
        if matches!(stack.get(m), Some(Value::Mark)) {
            return Some(m);
        }
        marks.pop();
    }
    None
}

/// What a new list is: `device_traces` (the value after that key in the top-level dict), one
/// device's entries (an item of `device_traces`), or an ordinary list.
fn list_role(stack: &[Value], mark: Option<usize>) -> Value {
    match stack {
        // The top-level dict, its SETITEMS mark, pairs, then the key.
        [Value::Dict(_), Value::Mark, rest @ ..]
            if rest.len() % 2 == 1
                && matches!(rest.last(), Some(Value::Str(k)) if &**k == "device_traces") =>
        {
            Value::DeviceTraces(0)
        }
        [Value::Dict(_), Value::Str(k)] if &**k == "device_traces" => Value::DeviceTraces(0),
        [.., Value::DeviceTraces(count)] => Value::Entries(*count),
        _ => {
            // Device lists pushed after the outer list's APPENDS mark.
            if let Some(m) = mark
                && let Some(Value::DeviceTraces(count)) = m.checked_sub(1).map(|i| &stack[i])
            {
                return Value::Entries(count + stack.len() - m - 1);
            }
            Value::List(Vec::new())
        }
    }
}

/// A whole number ≥ 0 that fits in a u64, or why not.
fn count_of(v: &Value, key: &str) -> Result<u64, String> {
    match v {
        Value::Int(n) if (0..=i128::from(u64::MAX)).contains(n) => Ok(*n as u64),
        Value::Int(n) => Err(format!("'{key}' is {n}, not a byte count or address")),
        other => Err(format!("'{key}' is {}, not an int", other.kind())),
    }
}

/// A byte count below 2^63: torch keeps sizes in an `int64_t`/`size_t` that no device fills, and
/// a larger one (from a corrupt or made-up file) would wrap every total it is added to.
fn size_of(v: &Value, key: &str) -> Result<u64, String> {
    let n = count_of(v, key)?;
    if n >= 1 << 63 {
        return Err(format!(
            "'{key}' is {n} bytes, 2^63 or more: no device holds that much; the file is corrupt"
        ));
    }
    Ok(n)
}

fn field<'v>(d: &'v Value, key: &str) -> Result<&'v Value, String> {
    d.get(key).ok_or_else(|| format!("no '{key}'"))
}

/// One entry of `device_traces` and its stack id (`None`: an action gpumem does not model).
fn trace_entry(v: &Value) -> Result<Option<(TraceEntry, u32)>, String> {
    if !matches!(v, Value::Dict(_)) {
        return Err(format!("{}, not a dict", v.kind()));
    }
    let action = match field(v, "action")? {
        Value::Str(s) => s.clone(),
        other => return Err(format!("'action' is {}, not a str", other.kind())),
    };
    let Some(action) = TraceAction::from_torch_name(&action)
        .or_else(|| (&*action == "free").then_some(TraceAction::FreeRequested))
    else {
        return Ok(None);
    };
    let addr_key = if action == TraceAction::Oom {
        "device_free"
    } else {
        "addr"
    };
    let stream = match v.get("stream") {
        // torch writes the stream handle as an int64: a pointer may read as negative.
        Some(Value::Int(n)) => *n as u64,
        Some(other) => return Err(format!("'stream' is {}, not an int", other.kind())),
        None => 0,
    };
    let time_us = match v.get("time_us") {
        Some(Value::Int(n)) => (*n).max(0) as u64,
        _ => 0,
    };
    let stack = match v.get("frames") {
        Some(Value::Stack(id)) => *id,
        _ => 0,
    };
    Ok(Some((
        TraceEntry {
            action,
            addr: count_of(field(v, addr_key)?, addr_key)?,
            size: size_of(field(v, "size")?, "size")?,
            stream,
            allocated: 0,
            reserved: 0,
            time_us,
            frames: Vec::new(),
            label: None,
        },
        stack,
    )))
}

/// The segments and settings of the top-level dict.
fn snapshot_contents(
    top: &Value,
    entries: Vec<usize>,
    skipped: usize,
) -> Result<SnapshotContents, SnapshotPickleError> {
    let schema = |reason: String| SnapshotPickleError::WrongSchema { reason };
    // torch.cuda.memory.memory_snapshot() returns the list of segments alone (no history), and
    // torch's _memory_viz.py reads it as such.
    if let Value::List(raw_segments) = top {
        let mut segments = Vec::new();
        for (i, s) in raw_segments.iter().enumerate() {
            if !matches!(s, Value::Dict(_)) {
                return Err(schema(format!(
                    "the pickle holds a list whose item {i} is {}: neither a snapshot dict nor \
                     the list of segment dicts torch.cuda.memory.memory_snapshot() returns",
                    s.kind()
                )));
            }
            segments.push(segment(s).map_err(|r| {
                schema(format!(
                    "the pickle holds a list (read as the segments \
                     torch.cuda.memory.memory_snapshot() returns): segments[{i}]: {r}"
                ))
            })?);
        }
        return Ok(SnapshotContents {
            segments,
            devices: 0,
            entries,
            skipped,
            alloc_conf: None,
        });
    }
    if !matches!(top, Value::Dict(_)) {
        return Err(schema(format!(
            "the pickle holds {}, not a dict",
            top.kind()
        )));
    }
    let devices = match top.get("device_traces") {
        Some(Value::DeviceTraces(n)) => *n,
        Some(other) => {
            return Err(schema(format!(
                "'device_traces' is {}, not a list of lists",
                other.kind()
            )));
        }
        None => {
            return Err(schema(
                "no 'device_traces' (torch.cuda.memory._snapshot() writes one list of trace \
                 entries per device; this dict has no trace)"
                    .into(),
            ));
        }
    };
    let Some(Value::List(raw_segments)) = top.get("segments") else {
        return Err(schema("no 'segments' list".into()));
    };
    let mut segments = Vec::new();
    for (i, s) in raw_segments.iter().enumerate() {
        segments.push(segment(s).map_err(|r| schema(format!("segments[{i}]: {r}")))?);
    }
    let alloc_conf = match top.get("allocator_settings") {
        Some(settings) => match settings.get("PYTORCH_CUDA_ALLOC_CONF") {
            Some(Value::Str(s)) => Some(s.to_string()),
            _ => None,
        },
        None => None,
    };
    let mut entries = entries;
    entries.resize(entries.len().max(devices), 0);
    Ok(SnapshotContents {
        segments,
        devices,
        entries,
        skipped,
        alloc_conf,
    })
}

/// One segment and its blocks.
fn segment(s: &Value) -> Result<(usize, SegmentInfo), String> {
    let device = count_of(field(s, "device")?, "device")? as usize;
    let address = count_of(field(s, "address")?, "address")?;
    let pool = match field(s, "segment_type")? {
        Value::Str(t) if &**t == "small" => Pool::Small,
        Value::Str(t) if &**t == "large" => Pool::Large,
        other => {
            return Err(format!(
                "'segment_type' is {other:?}, not 'small' or 'large'"
            ));
        }
    };
    let stream = match field(s, "stream")? {
        Value::Int(n) => *n as u64,
        other => return Err(format!("'stream' is {}, not an int", other.kind())),
    };
    let is_expandable = matches!(s.get("is_expandable"), Some(Value::Bool(true)));
    let Value::List(raw_blocks) = field(s, "blocks")? else {
        return Err("'blocks' is not a list".into());
    };
    let mut blocks = Vec::new();
    let mut cursor = address;
    for (j, b) in raw_blocks.iter().enumerate() {
        let at = |r: String| format!("blocks[{j}]: {r}");
        let size = size_of(field(b, "size").map_err(at)?, "size").map_err(at)?;
        let state = match field(b, "state").map_err(at)? {
            Value::Str(t) if &**t == "active_allocated" => BlockState::ActiveAllocated,
            Value::Str(t) if &**t == "active_pending_free" => BlockState::ActivePendingFree,
            Value::Str(t) if &**t == "inactive" => BlockState::Inactive,
            other => return Err(at(format!("'state' is {other:?}"))),
        };
        // torch 2.0's blocks keep the size asked for in their `history` (its first record's
        // `real_size`), as torch's _memory_viz.py reads it; with neither, the block's size.
        let requested_size = match (b.get("requested_size"), b.get("history")) {
            (Some(v), _) => size_of(v, "requested_size").map_err(at)?,
            (None, Some(Value::List(records))) if !records.is_empty() => {
                size_of(field(&records[0], "real_size").map_err(at)?, "real_size").map_err(at)?
            }
            _ if state == BlockState::Inactive => 0,
            _ => size,
        };
        let block_address = match b.get("address") {
            Some(v) => count_of(v, "address").map_err(at)?,
            None => cursor,
        };
        cursor = block_address.saturating_add(size);
        blocks.push(BlockInfo {
            address: block_address,
            size,
            requested_size,
            state,
        });
    }
    Ok((
        device,
        SegmentInfo::new(address, StreamId(stream), pool, is_expandable, blocks),
    ))
}

/// Reads the snapshot pickle at `path` (see [`read_snapshot`]).
pub fn read_snapshot_file(
    path: &Path,
    mut on_entry: impl FnMut(usize, TraceEntry),
) -> Result<SnapshotContents, SnapshotPickleError> {
    read_snapshot_file_stacks(path, |device, entry, _| on_entry(device, entry)).map(|(c, _)| c)
}

/// Reads the snapshot pickle at `path` with the entries' stacks (see [`read_snapshot_stacks`]).
pub fn read_snapshot_file_stacks(
    path: &Path,
    on_entry: impl FnMut(usize, TraceEntry, u32),
) -> Result<(SnapshotContents, Stacks), SnapshotPickleError> {
    let file = std::fs::File::open(path).map_err(|source| SnapshotPickleError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_snapshot_stacks(io::BufReader::with_capacity(1 << 16, file), on_entry).map_err(|e| match e
    {
        SnapshotPickleError::Io { source, .. } => SnapshotPickleError::Io {
            path: path.display().to_string(),
            source,
        },
        e => e,
    })
}

/// Whether `path` holds a pickle (its first byte is protocol 2+'s 0x80) rather than JSON.
pub fn is_pickle(path: &Path) -> bool {
    use io::Read;
    let mut first = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .is_ok_and(|()| first[0] == PROTO)
}

/// The replayable traces of a snapshot pickle, one per device whose `device_traces` list has
/// entries, as (device index, trace). Read as a stream: what is held is the replayable events
/// (24 bytes each) and the blocks live at the point reached, never the snapshot's entries.
pub fn read_alloc_traces(path: &Path) -> Result<Vec<(usize, AllocTrace)>, SnapshotPickleError> {
    let mut converters: Vec<EntryConverter> = Vec::new();
    let (contents, stacks) = read_snapshot_file_stacks(path, |device, entry, stack| {
        while converters.len() <= device {
            let n = converters.len();
            converters.push(EntryConverter::new(format!(
                "device_traces[{n}] of {}: allocs, free_requested entries, the blocks held \
                 before recording began (allocated first), out-of-memory requests and \
                 empty_cache() calls",
                path.display()
            )));
        }
        converters[device].push_with_stack(&entry, stack);
    })?;
    // The blocks the final segments hold allocated: those the trace never allocated were
    // there before recording began, and a replay allocates them first.
    let live_at_end = |device: usize| -> Vec<(u64, u64, u64)> {
        contents
            .segments
            .iter()
            .filter(|(d, _)| *d == device)
            .flat_map(|(_, seg)| {
                seg.blocks
                    .iter()
                    .filter(|b| b.state != BlockState::Inactive)
                    .map(move |b| (b.address, b.size, seg.stream))
            })
            .collect()
    };
    let traces: Vec<(usize, AllocTrace)> = converters
        .into_iter()
        .enumerate()
        .map(|(device, c)| {
            let mut trace = c.finish_from(&stacks, &live_at_end(device));
            trace.recorded_settings = Some(contents.alloc_conf.clone().unwrap_or_default());
            (device, trace)
        })
        .filter(|(_, t)| !t.events.is_empty())
        .collect();
    if traces.is_empty() {
        return Err(SnapshotPickleError::NoHistory {
            reason: format!(
                "a snapshot with no allocations recorded ({} segment(s); {} device list(s), {} \
                 entries): nothing to replay. Record a history with \
                 torch.cuda.memory._record_memory_history() before the work; `workbook inspect` \
                 shows this file's state",
                contents.segments.len(),
                contents.devices,
                contents.entries.iter().sum::<usize>()
            ),
        });
    }
    Ok(traces)
}

/// A snapshot pickle as a gpumem [`Snapshot`] (what `workbook viz` draws): the first device with
/// trace entries (else with segments), its segments, and its trace with running totals. torch's
/// entries carry no totals: `allocated` counts the bytes asked for (alloc minus free_completed)
/// and `reserved` the segments' bytes, both offset so that they end at what the segments hold.
/// The chosen device's entries are held (56 bytes each).
pub fn load_snapshot(path: &Path) -> Result<Snapshot, SnapshotPickleError> {
    load_device_snapshot(path, None)
}

/// [`load_snapshot`] for one device (`None`: the first with trace entries, else with segments):
/// only that device's entries are held.
pub fn load_device_snapshot(
    path: &Path,
    device: Option<usize>,
) -> Result<Snapshot, SnapshotPickleError> {
    let mut per_device: Vec<Vec<TraceEntry>> = Vec::new();
    let contents = read_snapshot_file(path, |d, entry| {
        if per_device.len() <= d {
            per_device.resize_with(d + 1, Vec::new);
        }
        // Only the device drawn keeps its entries (by default the first with entries).
        let kept = match device {
            Some(wanted) => d == wanted,
            None => per_device[..d].iter().all(Vec::is_empty),
        };
        if kept {
            per_device[d].push(entry);
        }
    })?;
    let device = device
        .or_else(|| per_device.iter().position(|t| !t.is_empty()))
        .or_else(|| contents.segments.first().map(|(d, _)| *d))
        .unwrap_or(0);
    let mut trace = per_device.into_iter().nth(device).unwrap_or_default();
    let segments: Vec<SegmentInfo> = contents
        .segments
        .into_iter()
        .filter(|(d, _)| *d == device)
        .map(|(_, s)| s)
        .collect();
    let (mut requested, mut reserved) = (0i128, 0i128);
    for e in &mut trace {
        let size = i128::from(e.size);
        match e.action {
            TraceAction::Alloc => requested += size,
            TraceAction::FreeCompleted => requested -= size,
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved += size,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved -= size,
            _ => {}
        }
        e.allocated = requested as u64;
        e.reserved = reserved as u64;
    }
    let final_requested: u64 = segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.requested_size)
        .sum();
    let final_reserved: u64 = segments.iter().map(|s| s.total_size).sum();
    let offset_requested = (i128::from(final_requested) - requested).max(0);
    let offset_reserved = (i128::from(final_reserved) - reserved).max(0);
    for e in &mut trace {
        e.allocated = (i128::from(e.allocated as i64) + offset_requested).max(0) as u64;
        e.reserved = (i128::from(e.reserved as i64) + offset_reserved).max(0) as u64;
    }
    let mut allocator_settings = AllocatorConfig::default();
    if let Some(text) = contents.alloc_conf.filter(|t| !t.is_empty()) {
        allocator_settings = AllocatorConfig::parse(&text).unwrap_or_default();
    }
    Ok(Snapshot {
        device: format!("device {device} of {}", path.display()),
        segments,
        trace,
        allocator_settings,
        host_segments: Vec::new(),
        host_traces: Vec::new(),
    })
}
