//! The clients' history and its checker: are the reads and writes of each
//! object linearizable (as if each took effect at one instant between its
//! call and its answer)?
//!
//! Each object is a register: writes replace the whole value (every written
//! value is unique), reads return it, an absent object reads as `None`. A
//! write that failed or timed out may still have taken effect, at any time
//! after its call, or never. A failed read tells nothing and is left out.
//! The search is Wing and Gong's, with Lowe's memo of (ops linearized,
//! value) states, and reads that match the value linearized at once (that
//! never removes a way forward).

use std::collections::{BTreeMap, HashSet};

/// A register's value: `None` while the object does not exist.
pub type Value = Option<String>;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Replace the object with this value.
    Write(String),
    /// Read the object.
    Read,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered at `at_ms`; a read saw `read`.
    Ok {
        /// When the answer came (virtual ms).
        at_ms: u64,
        /// What a read returned.
        read: Value,
    },
    /// Failed or timed out: a write may or may not have taken effect.
    Failed(String),
}

/// One client op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Which client.
    pub client: usize,
    /// The object.
    pub object: String,
    /// Read or write.
    pub kind: Kind,
    /// When it was called (virtual ms).
    pub call_ms: u64,
    /// When it ended, answered or failed (virtual ms).
    pub end_ms: u64,
    /// When each attempt was sent (virtual ms): the first, then resends.
    pub sends_ms: Vec<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

/// A state the search could not get past, or a budget it ran out of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The object.
    pub object: String,
    /// What went wrong.
    pub why: String,
}

/// Most states the search visits per object before giving up (reported as
/// a violation: a checker that cannot decide must not pass).
const STATES_MAX: usize = 2_000_000;

/// Checks every object's ops.
pub fn check(ops: &[Op]) -> Result<(), Violation> {
    let mut per: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        per.entry(op.object.as_str()).or_default().push(op);
    }
    for (object, ops) in per {
        check_object(object, &ops)?;
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Entry {
    call: u64,
    /// `u64::MAX` for a write that may still take effect.
    ret: u64,
    /// The value a write installs (index into the values), or the value a
    /// read must see.
    value: usize,
    write: bool,
    /// Answered ops must be linearized; failed writes may be left out.
    must: bool,
}

fn check_object(object: &str, ops: &[&Op]) -> Result<(), Violation> {
    let mut values: Vec<Value> = vec![None];
    let mut index = |v: &Value| match values.iter().position(|x| x == v) {
        Some(i) => i,
        None => {
            values.push(v.clone());
            values.len() - 1
        }
    };
    let mut entries = Vec::new();
    for op in ops {
        match (&op.kind, &op.outcome) {
            (Kind::Write(v), Outcome::Ok { at_ms, .. }) => entries.push(Entry {
                call: op.call_ms,
                ret: *at_ms,
                value: index(&Some(v.clone())),
                write: true,
                must: true,
            }),
            (Kind::Write(v), Outcome::Failed(_)) => entries.push(Entry {
                call: op.call_ms,
                ret: u64::MAX,
                value: index(&Some(v.clone())),
                write: true,
                must: false,
            }),
            (Kind::Read, Outcome::Ok { at_ms, read }) => entries.push(Entry {
                call: op.call_ms,
                ret: *at_ms,
                value: index(read),
                write: false,
                must: true,
            }),
            (Kind::Read, Outcome::Failed(_)) => {}
        }
    }
    // A read of a value nobody wrote is corruption, whatever the order.
    let written: HashSet<usize> = entries
        .iter()
        .filter(|e| e.write)
        .map(|e| e.value)
        .collect();
    if let Some(e) = entries
        .iter()
        .find(|e| !e.write && e.value != 0 && !written.contains(&e.value))
    {
        return Err(Violation {
            object: object.into(),
            why: format!(
                "a read at {} ms returned {:?}, which no client wrote",
                e.call, values[e.value]
            ),
        });
    }
    let mut search = Search {
        entries: &entries,
        seen: HashSet::new(),
        states: 0,
    };
    let done = vec![false; entries.len()];
    match search.dfs(done, 0) {
        Some(true) => Ok(()),
        Some(false) => Err(Violation {
            object: object.into(),
            why: format!(
                "not linearizable:\n{}",
                describe(ops, &values, &entries, object)
            ),
        }),
        None => Err(Violation {
            object: object.into(),
            why: format!("the checker gave up after {STATES_MAX} states"),
        }),
    }
}

fn describe(ops: &[&Op], _values: &[Value], _entries: &[Entry], _object: &str) -> String {
    let mut out = String::new();
    for op in ops {
        let what = match &op.kind {
            Kind::Write(v) => format!("write {v}"),
            Kind::Read => "read".into(),
        };
        let how = match &op.outcome {
            Outcome::Ok { at_ms, read } if op.kind == Kind::Read => {
                format!("-> {read:?} at {at_ms}")
            }
            Outcome::Ok { at_ms, .. } => format!("ok at {at_ms}"),
            Outcome::Failed(e) => format!("failed ({e})"),
        };
        out.push_str(&format!(
            "  client {} at {}: {what} {how}\n",
            op.client, op.call_ms
        ));
    }
    out
}

struct Search<'a> {
    entries: &'a [Entry],
    seen: HashSet<(Vec<bool>, usize)>,
    states: usize,
}

impl Search<'_> {
    /// `Some(true)`: the rest linearizes from (done, value); `Some(false)`:
    /// it does not; `None`: out of budget.
    fn dfs(&mut self, mut done: Vec<bool>, value: usize) -> Option<bool> {
        // Reads that see the current value go now.
        loop {
            let frontier = self.frontier(&done);
            let read = (0..self.entries.len()).find(|&i| {
                let e = &self.entries[i];
                !done[i] && !e.write && e.call <= frontier && e.value == value
            });
            match read {
                Some(i) => done[i] = true,
                None => break,
            }
        }
        if (0..self.entries.len()).all(|i| done[i] || !self.entries[i].must) {
            return Some(true);
        }
        if !self.seen.insert((done.clone(), value)) {
            return Some(false);
        }
        self.states += 1;
        if self.states > STATES_MAX {
            return None;
        }
        let frontier = self.frontier(&done);
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if done[i] || !e.write || e.call > frontier {
                continue;
            }
            let mut next = done.clone();
            next[i] = true;
            match self.dfs(next, e.value) {
                Some(false) => {}
                other => return other,
            }
        }
        Some(false)
    }

    /// The earliest answer among the ops not linearized yet: nothing
    /// called after it can go before it.
    fn frontier(&self, done: &[bool]) -> u64 {
        (0..self.entries.len())
            .filter(|&i| !done[i])
            .map(|i| self.entries[i].ret)
            .min()
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(client: usize, v: &str, call: u64, ret: Option<u64>) -> Op {
        Op {
            client,
            object: "o".into(),
            kind: Kind::Write(v.into()),
            call_ms: call,
            end_ms: ret.unwrap_or(call + 100),
            sends_ms: vec![call],
            outcome: match ret {
                Some(at_ms) => Outcome::Ok { at_ms, read: None },
                None => Outcome::Failed("timeout".into()),
            },
        }
    }

    fn r(client: usize, v: Option<&str>, call: u64, ret: u64) -> Op {
        Op {
            client,
            object: "o".into(),
            kind: Kind::Read,
            call_ms: call,
            end_ms: ret,
            sends_ms: vec![call],
            outcome: Outcome::Ok {
                at_ms: ret,
                read: v.map(str::to_string),
            },
        }
    }

    #[test]
    fn sequential_and_concurrent_histories_pass() {
        // Sequential.
        let h = [
            r(0, None, 0, 1),
            w(0, "a", 2, Some(3)),
            r(1, Some("a"), 4, 5),
        ];
        assert_eq!(check(&h), Ok(()));
        // A read overlapping a write may see either value.
        let h = [
            w(0, "a", 0, Some(10)),
            r(1, None, 1, 2),
            r(2, Some("a"), 3, 4),
        ];
        assert_eq!(check(&h), Ok(()));
        // A failed write may have taken effect late, or never.
        let h = [w(0, "a", 0, None), r(1, None, 5, 6), r(1, Some("a"), 7, 8)];
        assert_eq!(check(&h), Ok(()));
        let h = [w(0, "a", 0, None), r(1, None, 5, 6)];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn lost_and_stale_and_invented_values_fail() {
        // An acknowledged write is lost.
        let h = [w(0, "a", 0, Some(1)), r(1, None, 2, 3)];
        assert!(check(&h).is_err());
        // A stale read after a newer value was read.
        let h = [
            w(0, "a", 0, Some(1)),
            w(0, "b", 2, Some(3)),
            r(1, Some("b"), 4, 5),
            r(2, Some("a"), 6, 7),
        ];
        assert!(check(&h).is_err());
        // Once seen, a failed write cannot be unseen.
        let h = [
            w(0, "a", 0, Some(1)),
            w(1, "b", 2, None),
            r(2, Some("b"), 3, 4),
            r(2, Some("a"), 5, 6),
        ];
        assert!(check(&h).is_err());
        // A value nobody wrote.
        let h = [w(0, "a", 0, Some(1)), r(1, Some("zz"), 2, 3)];
        let v = check(&h).unwrap_err();
        assert!(v.why.contains("no client wrote"), "{v:?}");
    }

    #[test]
    fn objects_are_independent() {
        let mut b = w(0, "x", 0, Some(1));
        b.object = "p".into();
        let h = [w(0, "a", 0, Some(1)), b, r(1, Some("a"), 2, 3)];
        assert_eq!(check(&h), Ok(()));
    }
}
