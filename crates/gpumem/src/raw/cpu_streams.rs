//! The cpu device's streams: a queue of work per stream, run in each stream's order either at once
//! (the default) or late, as a GPU runs it: only when a synchronize, an event or a wait from another
//! stream needs it. Late, a missing wait shows on cpu as it would on a GPU: the reader sees the
//! memory as it was before the work it forgot to wait for.

use crate::raw::backend::StreamPoint;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

/// One item of a stream's work.
enum Work {
    /// A copy or a fill, on raw addresses.
    Run(Box<dyn FnOnce() + Send>),
    /// `cuStreamWaitEvent`: what follows waits until `stream` has done `position` items.
    Wait { stream: u64, position: u64 },
}

/// One stream's queue: `done` of its `queued` items have run; `pending` holds the others in order.
#[derive(Default)]
struct Queue {
    pending: VecDeque<Work>,
    queued: u64,
    done: u64,
}

#[derive(Default)]
struct State {
    late: bool,
    queues: HashMap<u64, Queue>,
}

impl State {
    /// Runs `stream`'s items, in order, until it has done `position` of them (or all it has); a
    /// wait runs the other stream's items first. Waits name positions queued before them, so this
    /// never goes round in a circle.
    fn run_until(&mut self, stream: u64, position: u64) {
        loop {
            let queue = self.queues.entry(stream).or_default();
            if queue.done >= position {
                return;
            }
            let Some(work) = queue.pending.pop_front() else {
                return;
            };
            queue.done += 1;
            match work {
                Work::Run(f) => f(),
                Work::Wait { stream, position } => self.run_until(stream, position),
            }
        }
    }

    fn run_all(&mut self) {
        let streams: Vec<u64> = self.queues.keys().copied().collect();
        for stream in streams {
            self.run_until(stream, u64::MAX);
        }
    }

    fn push(&mut self, stream: u64, work: Work) {
        let queue = self.queues.entry(stream).or_default();
        queue.pending.push_back(work);
        queue.queued += 1;
        if !self.late {
            self.run_until(stream, u64::MAX);
        }
    }
}

/// The work queued on every stream of one cpu device.
#[derive(Default)]
pub struct StreamQueues {
    state: Mutex<State>,
}

impl StreamQueues {
    fn state(&self) -> MutexGuard<'_, State> {
        // The queues are edited before any work runs; a panic in a copy leaves them consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether queued work waits until something needs it.
    pub fn late(&self) -> bool {
        self.state().late
    }

    /// Runs work late (as a GPU does) or at once; switching to at once first runs everything.
    pub fn set_late(&self, late: bool) {
        let mut state = self.state();
        if !late {
            state.run_all();
        }
        state.late = late;
    }

    /// Queues `work` on `stream`, after everything queued there before.
    pub fn enqueue(&self, stream: u64, work: impl FnOnce() + Send + 'static) {
        self.state().push(stream, Work::Run(Box::new(work)));
    }

    /// Makes what is queued on `stream` from now on wait for `point`.
    pub fn wait(&self, stream: u64, point: StreamPoint) {
        if stream != point.stream {
            let wait = Work::Wait {
                stream: point.stream,
                position: point.position,
            };
            self.state().push(stream, wait);
        }
    }

    /// The current end of `stream`'s work.
    pub fn record(&self, stream: u64) -> StreamPoint {
        let mut state = self.state();
        let position = state.queues.entry(stream).or_default().queued;
        StreamPoint { stream, position }
    }

    /// Whether the work before `point` has run.
    pub fn reached(&self, point: StreamPoint) -> bool {
        self.state()
            .queues
            .get(&point.stream)
            .is_none_or(|q| q.done >= point.position)
    }

    /// Runs the work before `point` (and what it waits for).
    pub fn run_until(&self, point: StreamPoint) {
        self.state().run_until(point.stream, point.position);
    }

    /// Runs everything queued on `stream`.
    pub fn run_stream(&self, stream: u64) {
        self.state().run_until(stream, u64::MAX);
    }

    /// Runs everything queued on every stream.
    pub fn run_all(&self) {
        self.state().run_all();
    }

    /// Forgets a destroyed stream, after running its work.
    pub fn remove(&self, stream: u64) {
        let mut state = self.state();
        state.run_until(stream, u64::MAX);
        state.queues.remove(&stream);
    }
}

#[cfg(test)]
mod tests {
    use super::{StreamPoint, StreamQueues};
    use std::sync::{Arc, Mutex};

    /// What the queued items did, in order.
    type Log = Arc<Mutex<Vec<&'static str>>>;

    /// A queued item that writes `name` into `log` when it runs.
    fn item(log: &Log, name: &'static str) -> impl FnOnce() + Send + 'static {
        let log = log.clone();
        move || log.lock().unwrap().push(name)
    }

    #[test]
    fn at_once_every_item_runs_when_queued() {
        let queues = StreamQueues::default();
        let log = Log::default();
        queues.enqueue(1, item(&log, "a"));
        assert_eq!(*log.lock().unwrap(), ["a"]);
        assert!(queues.reached(queues.record(1)));
    }

    #[test]
    fn late_items_run_only_when_needed_and_in_their_streams_order() {
        let queues = StreamQueues::default();
        queues.set_late(true);
        let log = Log::default();
        queues.enqueue(1, item(&log, "a1"));
        let point = queues.record(1);
        queues.enqueue(1, item(&log, "b1"));
        queues.enqueue(2, item(&log, "a2"));
        assert!(log.lock().unwrap().is_empty());
        assert!(!queues.reached(point));
        queues.run_until(point);
        assert_eq!(*log.lock().unwrap(), ["a1"]);
        assert!(queues.reached(point));
        queues.run_stream(2);
        assert_eq!(*log.lock().unwrap(), ["a1", "a2"]);
        queues.run_all();
        assert_eq!(*log.lock().unwrap(), ["a1", "a2", "b1"]);
    }

    #[test]
    fn a_wait_runs_the_other_streams_work_first_and_only_up_to_its_event() {
        let queues = StreamQueues::default();
        queues.set_late(true);
        let log = Log::default();
        queues.enqueue(1, item(&log, "copy"));
        let point = queues.record(1);
        queues.enqueue(1, item(&log, "later on 1"));
        queues.wait(0, point);
        queues.enqueue(0, item(&log, "read"));
        queues.run_stream(0);
        assert_eq!(*log.lock().unwrap(), ["copy", "read"]);
        assert!(!queues.reached(StreamPoint {
            stream: 1,
            position: 2
        }));
    }

    #[test]
    fn switching_back_to_at_once_runs_what_was_queued() {
        let queues = StreamQueues::default();
        queues.set_late(true);
        let log = Log::default();
        queues.enqueue(3, item(&log, "a"));
        queues.set_late(false);
        assert_eq!(*log.lock().unwrap(), ["a"]);
        assert!(!queues.late());
    }
}
