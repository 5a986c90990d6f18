//! Coalescing: concurrent decisions' scripts share one write to Redis, and Redis one read.
//!
//! Flat combining, with no I/O thread in between: a decision that finds no write in flight
//! *leads*. It takes every command queued so far (its own first), writes them in one write on its
//! own blocking connection, reads their answers, hands each to the decision that queued it, and
//! passes the lead to the first decision that queued meanwhile. Decisions that arrive while a
//! write is in flight queue their command and sleep until their answer (or the lead) comes.
//!
//! Alone on the path, a decision leads itself: one write and one read on its own connection, as
//! without coalescing. Under load the queue fills while each write is in flight, so Redis reads a
//! batch of scripts with one `read` and answers them with one `write`, instead of a read, a write
//! and an event-loop turn per script (measured: that per-call work was about 40 of the ≈ 100 µs of
//! Redis CPU per decision; README, performance). Each command keeps its own answer, its own
//! error and its own retry policy; nothing is merged.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;

use redis::{Script, Value};

use super::Failed;

/// The most commands one write carries (the rest wait for the next).
pub(super) const MAX_BATCH: usize = 64;

/// A queued command and where its answer goes.
pub(super) struct Waiter {
    pub(super) packed: Vec<u8>,
    pub(super) script: &'static Script,
    thread: Thread,
    state: Mutex<State>,
}

enum State {
    Waiting,
    /// The decision that queued this command now leads.
    Lead,
    Done(Result<Value, Failed>),
}

#[derive(Default)]
struct Queue {
    pending: Vec<Arc<Waiter>>,
    /// Whether some decision leads (a write is in flight, or the lead is being handed over).
    leading: bool,
}

/// The queue of one Redis node's coalesced commands.
#[derive(Default)]
pub(super) struct Combiner {
    queue: Mutex<Queue>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here panics while holding a lock; recover the data if something did.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Waiter {
    fn set(&self, s: State) {
        *lock(&self.state) = s;
        self.thread.unpark();
    }
}

impl Combiner {
    /// Runs `packed` (an `EVALSHA` of `script`) in a write shared with the commands queued
    /// beside it; `send` writes one batch on the caller's connection and returns one answer per
    /// command, in order.
    pub(super) fn run(
        &self,
        script: &'static Script,
        packed: Vec<u8>,
        send: impl Fn(&[Arc<Waiter>]) -> Vec<Result<Value, Failed>>,
    ) -> Result<Value, Failed> {
        let me = Arc::new(Waiter {
            packed,
            script,
            thread: std::thread::current(),
            state: Mutex::new(State::Waiting),
        });
        let lead_now = {
            let mut q = lock(&self.queue);
            q.pending.push(me.clone());
            !std::mem::replace(&mut q.leading, true)
        };
        if !lead_now {
            loop {
                // (A statement of its own: a guard in the `match` would be held while parked.)
                let state = std::mem::replace(&mut *lock(&me.state), State::Waiting);
                match state {
                    State::Waiting => std::thread::park(),
                    State::Lead => break,
                    State::Done(r) => return r,
                }
            }
        }
        // Leading: `me` is first in the queue (it was pushed before the lead was free, or it was
        // first when the lead was handed to it), so the first batch carries it.
        let mut guard = Lead {
            combiner: self,
            batch: Vec::new(),
        };
        loop {
            guard.batch = {
                let mut q = lock(&self.queue);
                let n = q.pending.len().min(MAX_BATCH);
                q.pending.drain(..n).collect()
            };
            let mut answers = send(&guard.batch).into_iter();
            let mut mine = None;
            for w in std::mem::take(&mut guard.batch) {
                // (An answer missing from `send` is an error, never a decision left asleep.)
                let a = answers.next().unwrap_or_else(|| Err(failed()));
                if Arc::ptr_eq(&w, &me) {
                    mine = Some(a);
                } else {
                    w.set(State::Done(a));
                }
            }
            if let Some(a) = mine {
                std::mem::forget(guard);
                let mut q = lock(&self.queue);
                match q.pending.first() {
                    Some(next) => next.set(State::Lead),
                    None => q.leading = false,
                }
                return a;
            }
            // Not reached: `me` was in the batch. Loop rather than lose an answer.
        }
    }
}

fn failed() -> Failed {
    Failed::Other(rampart_core::store::StoreError::Unavailable(
        "redis: the coalesced write failed".into(),
    ))
}

/// While a decision leads: if it unwinds (a bug), every command it carried or that is queued
/// gets an error and the lead is free again, so no decision sleeps forever.
struct Lead<'a> {
    combiner: &'a Combiner,
    batch: Vec<Arc<Waiter>>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        for w in self.batch.drain(..) {
            w.set(State::Done(Err(failed())));
        }
        let mut q = lock(&self.combiner.queue);
        match q.pending.first() {
            Some(next) => next.set(State::Lead),
            None => q.leading = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static S: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new("return 1"));

    /// Every caller gets its own answer, batches form under concurrency, and a lone caller leads
    /// itself.
    #[test]
    fn each_caller_gets_its_own_answer_and_batches_form() {
        let c = Arc::new(Combiner::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let biggest = Arc::new(AtomicUsize::new(0));
        let send = {
            let (writes, biggest) = (writes.clone(), biggest.clone());
            move |b: &[Arc<Waiter>]| {
                writes.fetch_add(1, Ordering::Relaxed);
                biggest.fetch_max(b.len(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
                b.iter()
                    .map(|w| Ok(Value::BulkString(w.packed.clone())))
                    .collect()
            }
        };
        let alone = c.run(&S, b"alone".to_vec(), send.clone());
        assert!(matches!(alone, Ok(Value::BulkString(v)) if v == b"alone"));
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let (c, send) = (c.clone(), send.clone());
                std::thread::spawn(move || {
                    for i in 0..20 {
                        let me = format!("{t}-{i}").into_bytes();
                        match c.run(&S, me.clone(), send.clone()) {
                            Ok(Value::BulkString(v)) => assert_eq!(v, me),
                            other => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let w = writes.load(Ordering::Relaxed);
        assert!(w < 1 + 16 * 20, "{w} writes for {} commands", 1 + 16 * 20);
        assert!(biggest.load(Ordering::Relaxed) > 1);
        assert!(!lock(&c.queue).leading);
    }

    /// A leader that unwinds fails what it carried and frees the lead.
    #[test]
    fn a_leader_that_unwinds_fails_its_batch_and_frees_the_lead() {
        let c = Combiner::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.run(&S, b"x".to_vec(), |_| panic!("bug"))
        }));
        assert!(r.is_err());
        assert!(!lock(&c.queue).leading);
        let ok = c.run(&S, b"y".to_vec(), |b| {
            b.iter().map(|_| Ok(Value::Okay)).collect()
        });
        assert!(matches!(ok, Ok(Value::Okay)));
    }
}
