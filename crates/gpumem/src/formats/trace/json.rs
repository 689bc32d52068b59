//! The trace file: JSON text, read with every event checked (the first bad one named by index)
//! and written one event per line.

use super::events::{AllocTrace, FORMAT, TraceError, TraceEvent, VERSION};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

impl AllocTrace {
    /// Reads a trace file's text and checks every event (the first problem is named by index).
    pub fn from_json(text: &str) -> Result<AllocTrace, TraceError> {
        let raw: RawTrace = serde_json::from_str(text).map_err(|e| TraceError::Malformed {
            message: e.to_string(),
        })?;
        match &raw.format {
            Some(Value::String(f)) if f == FORMAT => {}
            Some(other) => {
                return Err(TraceError::NotATrace {
                    reason: format!("\"format\" is {}, expected \"{FORMAT}\"", short(other)),
                });
            }
            None => {
                return Err(TraceError::NotATrace {
                    reason: format!("no \"format\": \"{FORMAT}\" field"),
                });
            }
        }
        match &raw.version {
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(v) => {
                return Err(TraceError::UnsupportedVersion {
                    found: short(v).to_string(),
                });
            }
            None => {
                return Err(TraceError::NotATrace {
                    reason: "no \"version\" field".into(),
                });
            }
        }
        let description = match raw.description {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(TraceError::NotATrace {
                    reason: format!("\"description\" must be a string, found {}", short(&other)),
                });
            }
        };
        let Some(EventList(values)) = raw.events else {
            return Err(TraceError::NotATrace {
                reason: "no \"events\" list".into(),
            });
        };
        let events = values
            .iter()
            .enumerate()
            .map(|(index, value)| parse_event(index, value))
            .collect::<Result<Vec<_>, _>>()?;
        let trace = AllocTrace {
            description,
            events,
            ..AllocTrace::default()
        };
        trace.validate()?;
        Ok(trace)
    }

    /// The trace as JSON text: one event per line, so that files diff well.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.events.len() * 48);
        out.push_str("{\n");
        out.push_str(&format!("  \"format\": \"{FORMAT}\",\n"));
        out.push_str(&format!("  \"version\": {VERSION},\n"));
        out.push_str(&format!(
            "  \"description\": {},\n",
            serde_json::to_string(&self.description).expect("a string serialises")
        ));
        out.push_str("  \"events\": [");
        for (i, event) in self.events.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            out.push_str(&serde_json::to_string(event).expect("an event serialises"));
        }
        out.push_str(if self.events.is_empty() {
            "]\n}\n"
        } else {
            "\n  ]\n}\n"
        });
        out
    }
}

/// A JSON value for a message, cut short.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

/// One event from its JSON value.
fn parse_event(index: usize, value: &Value) -> Result<TraceEvent, TraceError> {
    let bad = |reason: String| TraceError::BadEvent { index, reason };
    let object = value.as_object().ok_or_else(|| {
        bad(format!(
            "expected an object such as {{\"op\":\"free\",\"id\":3}}, found {}",
            short(value)
        ))
    })?;
    let op = match object.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(other) => {
            return Err(bad(format!(
                "\"op\" must be a string, found {}",
                short(other)
            )));
        }
        None => {
            return Err(bad(
                "no \"op\" (\"alloc\", \"free\" or \"empty_cache\")".into()
            ));
        }
    };
    let allowed: &[&str] = match op {
        "alloc" => &["op", "id", "size", "stream"],
        "free" => &["op", "id"],
        "empty_cache" => &["op"],
        _ => {
            return Err(TraceError::UnknownOp {
                index,
                op: op.to_string(),
            });
        }
    };
    let article = if op == "alloc" { "an" } else { "a" };
    if let Some(key) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown field {key:?} in {article} {op} event (it has {})",
            allowed[1..].join(", ")
        )));
    }
    let number = |name: &str, default: Option<u64>| -> Result<u64, TraceError> {
        match (object.get(name), default) {
            (Some(v), _) => v.as_u64().ok_or_else(|| {
                bad(format!(
                    "\"{name}\" must be a whole number ≥ 0, found {}",
                    short(v)
                ))
            }),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(bad(format!("{article} {op} event needs \"{name}\""))),
        }
    };
    if op == "empty_cache" {
        return Ok(TraceEvent::EmptyCache);
    }
    let id = number("id", None)?;
    Ok(if op == "alloc" {
        TraceEvent::Alloc {
            id,
            size: number("size", None)?,
            stream: number("stream", Some(0))?,
        }
    } else {
        TraceEvent::Free { id }
    })
}

/// The top level of a trace file, read leniently so that the checks above can name what is wrong.
struct RawTrace {
    format: Option<Value>,
    version: Option<Value>,
    description: Option<Value>,
    events: Option<EventList>,
}

/// The `events` list, as JSON values; a syntax error inside it names the event it is in.
struct EventList(Vec<Value>);

/// serde_json appends " at line L column C" to errors; an error re-raised one level up gets its
/// position again, so the inner one is dropped.
fn without_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => &message[..i],
        _ => message,
    }
}

impl<'de> serde::Deserialize<'de> for EventList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = EventList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of events")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventList, A::Error> {
                let mut values = Vec::new();
                loop {
                    match seq.next_element::<Value>() {
                        Ok(Some(value)) => values.push(value),
                        Ok(None) => return Ok(EventList(values)),
                        Err(e) => {
                            let message = e.to_string();
                            return Err(de::Error::custom(format!(
                                "event {}: {}",
                                values.len(),
                                without_position(&message)
                            )));
                        }
                    }
                }
            }
        }
        deserializer.deserialize_seq(ListVisitor)
    }
}

impl<'de> serde::Deserialize<'de> for RawTrace {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = RawTrace;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a trace object {{\"format\": \"{FORMAT}\", \"version\": {VERSION}, \"events\": [...]}}"
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTrace, A::Error> {
                let mut raw = RawTrace {
                    format: None,
                    version: None,
                    description: None,
                    events: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "format" => raw.format = Some(map.next_value()?),
                        "version" => raw.version = Some(map.next_value()?),
                        "description" => raw.description = Some(map.next_value()?),
                        "events" => raw.events = Some(map.next_value()?),
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(TopVisitor)
    }
}
