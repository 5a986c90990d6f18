//! The audit log's entries, and how a change records one.

use serde::{Deserialize, Serialize};

use super::Control;
use crate::auth::{Principal, Role};
use crate::clock::now_ms;

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub seq: u64,
    pub time_ms: i64,
    pub actor: String,
    pub role: Role,
    pub via: String,
    /// e.g. `ruleset.upload`, `rollout.stage`, `rollout.approve`, `rollout.rollback`,
    /// `rollout.auto-rollback`, `ruleset.activate`, `list.add`, `list.remove`, `key.add`,
    /// `key.approve`, `key.retire`, `login`, `logout`, `settings.log-level`,
    /// `subject.reputation.reset`, `limit.reset`, `breaker.close`, `breaker.open`.
    pub action: String,
    pub target: String,
    /// Hash of what the action replaced (e.g. the stable version before), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Hash of what the action put in place, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
    /// The hash chain: SHA-256 (hex) of the previous entry's stored line, `""` for the first
    /// chained entry. Entries written before the chain existed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
}

/// SHA-256 (hex) of a stored audit line: the next entry's `prev`, and the log's head.
pub fn line_hash(line: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(line.as_bytes()))
}

/// What `rampart audit verify` found.
#[derive(Debug, Default)]
pub struct ChainReport {
    /// Entries read (exports and the live log).
    pub entries: usize,
    /// Entries from before the chain began (no `prev`): they cannot be verified.
    pub unchained: usize,
    /// The last entry's sequence number and hash.
    pub last: Option<(u64, String)>,
    /// Every break: where, and what is wrong.
    pub problems: Vec<String>,
}

/// Checks a log's lines in order (`(where, line)`: exported files first, then the live log):
/// each parses, sequence numbers follow one another, each entry's `prev` is the hash of the line
/// before it, and the last line's hash is the recorded `head` when there is one. An edited,
/// removed, inserted or reordered line breaks the chain at the line after it; a removed tail is
/// caught by the head.
pub fn verify_chain<'a>(
    lines: impl IntoIterator<Item = (&'a str, &'a str)>,
    head: Option<&str>,
) -> ChainReport {
    let mut r = ChainReport::default();
    let mut before: Option<(u64, String)> = None;
    let mut chained = false;
    for (at, line) in lines {
        r.entries += 1;
        let hash = line_hash(line);
        let e: AuditEntry = match serde_json::from_str(line) {
            Ok(e) => e,
            Err(err) => {
                r.problems.push(format!("{at}: not an audit entry ({err})"));
                before = None;
                continue;
            }
        };
        match (&e.prev, &before) {
            (None, _) if !chained => r.unchained += 1,
            (None, _) => r.problems.push(format!(
                "{at}: entry {} has no hash of its predecessor inside the chain",
                e.seq
            )),
            (Some(p), Some((seq, h))) => {
                chained = true;
                if e.seq != seq + 1 {
                    r.problems
                        .push(format!("{at}: entry {} follows entry {seq}", e.seq));
                }
                if p != h {
                    r.problems.push(format!(
                        "{at}: entry {} does not chain to entry {seq} (that entry or this one was altered, or entries between them removed)",
                        e.seq
                    ));
                }
            }
            (Some(p), None) => {
                // The first line, or the one after an unreadable line (reported already).
                if r.entries == 1 && !p.is_empty() {
                    r.problems.push(format!(
                        "{at}: the log starts at entry {}, whose predecessor is missing (an export file left out?)",
                        e.seq
                    ));
                }
                chained = true;
            }
        }
        before = Some((e.seq, hash));
    }
    if let (Some(h), Some((seq, last))) = (head, &before) {
        if h != last {
            r.problems.push(format!(
                "the recorded head does not match the last entry ({seq}): entries after it were removed, or it was altered"
            ));
        }
    }
    if head.is_some() && before.is_none() && r.entries == 0 {
        r.problems
            .push("the log is empty but a head is recorded: every entry was removed".into());
    }
    r.last = before;
    r
}

/// The audit entry a change produces.
pub struct Audit {
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub detail: serde_json::Value,
}

impl Audit {
    /// An import that is recorded but not made stable (a new built-in set while another
    /// version is stable).
    pub(super) fn none() -> Audit {
        Audit {
            action: "ruleset.import-skipped".into(),
            target: String::new(),
            before: None,
            after: None,
            detail: serde_json::Value::Null,
        }
    }
}

impl Control {
    /// Records an audit entry (a failure to record is logged: the change itself is done).
    pub fn audit(
        &self,
        who: &Principal,
        action: &str,
        target: &str,
        before: Option<String>,
        after: Option<String>,
        detail: serde_json::Value,
    ) {
        let mut e = AuditEntry {
            seq: 0,
            time_ms: now_ms(),
            actor: who.name.clone(),
            role: who.role,
            via: format!("{:?}", who.via).to_ascii_lowercase(),
            action: action.into(),
            target: target.into(),
            before,
            after,
            detail,
            prev: None,
        };
        if let Err(err) = self.store.append_audit(&mut e) {
            tracing::error!(%err, action, actor = %who.name, "cannot append to the audit log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, prev: Option<String>) -> String {
        serde_json::to_string(&AuditEntry {
            seq,
            time_ms: 1_000 + seq as i64,
            actor: "alice".into(),
            role: Role::Admin,
            via: "session".into(),
            action: "rollout.approve".into(),
            target: format!("v{seq}"),
            before: None,
            after: Some(format!("v{seq}")),
            detail: serde_json::Value::Null,
            prev,
        })
        .unwrap()
    }

    /// Two legacy entries, then eight chained ones.
    fn log() -> Vec<String> {
        let mut lines = vec![entry(1, None), entry(2, None)];
        for seq in 3..=10 {
            let prev = line_hash(lines.last().unwrap());
            lines.push(entry(seq, Some(prev)));
        }
        lines
    }

    fn check(lines: &[String], head: Option<&str>) -> ChainReport {
        verify_chain(
            lines.iter().enumerate().map(|(i, l)| {
                (
                    ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"][i % 10],
                    l.as_str(),
                )
            }),
            head,
        )
    }

    #[test]
    fn an_intact_chain_verifies() {
        let l = log();
        let head = line_hash(l.last().unwrap());
        let r = check(&l, Some(&head));
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!((r.entries, r.unchained), (10, 2));
        assert_eq!(r.last.unwrap().0, 10);
    }

    /// Every kind of tampering is caught, and said where.
    #[test]
    fn edits_removals_insertions_and_a_cut_tail_break_it() {
        let l = log();
        let head = line_hash(l.last().unwrap());
        // An edited entry (the actor changed): the next one no longer chains to it.
        let mut edited = l.clone();
        edited[5] = edited[5].replace("alice", "mallory");
        let r = check(&edited, Some(&head));
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(
            r.problems[0].starts_with("g: entry 7 does not chain to entry 6"),
            "{:?}",
            r.problems
        );
        // A removed entry in the middle.
        let mut removed = l.clone();
        removed.remove(4);
        assert!(check(&removed, Some(&head))
            .problems
            .iter()
            .any(|p| p.contains("entry 6 follows entry 4")));
        // An inserted forgery, however well formed.
        let mut inserted = l.clone();
        inserted.insert(6, entry(7, Some(line_hash(&l[5]))));
        assert!(!check(&inserted, Some(&head)).problems.is_empty());
        // The last entries cut off: the head catches it.
        let cut = &l[..8];
        let r = check(cut, Some(&head));
        assert!(
            r.problems.iter().any(|p| p.contains("recorded head")),
            "{:?}",
            r.problems
        );
        // A line that does not parse is named, not skipped.
        let mut garbled = l.clone();
        garbled[3] = "{\"seq\":4,".into();
        let r = check(&garbled, Some(&head));
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with("d: not an audit entry")),
            "{:?}",
            r.problems
        );
        // An unchained entry inside the chain.
        let mut unchained = l.clone();
        unchained[7] = entry(8, None);
        assert!(!check(&unchained, None).problems.is_empty());
    }
}
