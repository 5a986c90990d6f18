//! The regression ratchet: the committed list of samples that pass their expected decision. It
//! may grow; it never shrinks unless someone runs `--update-ratchet` and commits the change, where
//! review sees exactly which samples were given up.

use std::collections::BTreeSet;
use std::path::Path;

const HEADER: &str = "\
# Samples that pass their expected decision under this rule set. `rampart-rules test` fails when
# one of them stops passing. The list may grow; removing a name is a reviewed change made with
# `rampart-rules test --update-ratchet`. One sample name per line, sorted.
";

/// The names in the ratchet file, or `None` when there is no file yet.
pub fn load(path: &Path) -> Result<Option<BTreeSet<String>>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `names` as the ratchet (atomically: a temporary file renamed over it).
pub fn store(path: &Path, names: &BTreeSet<String>) -> Result<(), String> {
    let mut text = String::from(HEADER);
    for n in names {
        text.push_str(n);
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A test run measured against the ratchet.
#[derive(Debug, Default, serde::Serialize)]
pub struct Verdict {
    /// In the ratchet, not passing now: the run fails.
    pub regressed: Vec<String>,
    /// Passing now, not yet in the ratchet: `--update-ratchet` adds them.
    pub newly_passing: Vec<String>,
    /// In the ratchet but no longer among the samples (renamed or deleted).
    pub missing: Vec<String>,
}

pub fn judge(
    ratchet: &BTreeSet<String>,
    passing: &BTreeSet<String>,
    all: &BTreeSet<String>,
) -> Verdict {
    Verdict {
        regressed: ratchet
            .iter()
            .filter(|n| all.contains(*n) && !passing.contains(*n))
            .cloned()
            .collect(),
        newly_passing: passing.difference(ratchet).cloned().collect(),
        missing: ratchet.difference(all).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_ratchet_fails_on_shrinking_only() {
        let all = set(&["a", "b", "c", "d"]);
        let v = judge(&set(&["a", "b", "gone"]), &set(&["a", "c"]), &all);
        assert_eq!(v.regressed, vec!["b"]);
        assert_eq!(v.newly_passing, vec!["c"]);
        assert_eq!(v.missing, vec!["gone"]);
    }

    #[test]
    fn round_trips_through_its_file() {
        let dir = std::env::temp_dir().join(format!("rampart-ratchet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("ratchet.txt");
        assert_eq!(load(&p).unwrap(), None);
        store(&p, &set(&["x/b", "x/a"])).unwrap();
        assert_eq!(load(&p).unwrap(), Some(set(&["x/a", "x/b"])));
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .starts_with("# Samples"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
