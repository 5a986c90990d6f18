//! Reading rule sets, samples and recorded traffic from disk: the one place the server (`rampart`)
//! and the pipeline (`rampart-rules`) both read them from, so that a directory means the same set
//! to both. The core crate does no I/O; this crate is its file-system edge.

use std::hash::{Hash, Hasher};
use std::path::Path;

use rampart_core::lifecycle::backtest::Recorded;
use rampart_core::lifecycle::regress::Sample;
use rampart_core::rules::Source;

/// Directories under the rule directory that are not part of the rule set.
const SKIP_DIRS: [&str; 1] = ["samples"];

/// Every non-hidden file under `dir` (except `samples/` and top-level docs), with paths relative
/// to `dir` using `/`. The compiler decides what is valid.
pub fn read_sources(dir: &Path) -> std::io::Result<Vec<Source>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut |path, rel| {
        let text = std::fs::read_to_string(path)?;
        out.push(Source { path: rel, text });
        Ok(())
    })?;
    Ok(out)
}

/// A cheap signature of the directory (paths, sizes, modification times) for change polling.
pub fn signature(dir: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let _ = walk(dir, dir, &mut |path, rel| {
        rel.hash(&mut h);
        if let Ok(m) = std::fs::metadata(path) {
            m.len().hash(&mut h);
            m.modified().ok().hash(&mut h);
        }
        Ok(())
    });
    h.finish()
}

/// Whether a path relative to the rule directory (`/`-separated) belongs to the rule set: not
/// hidden, not under `samples/`, not a top-level `*.md`. The same test for a directory on disk and
/// for a git tree.
pub fn is_rule_file(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    !(parts.iter().any(|p| p.starts_with('.') || p.is_empty())
        || (parts.len() > 1 && SKIP_DIRS.contains(&parts[0]))
        || (parts.len() == 1 && rel.ends_with(".md")))
}

fn walk(
    root: &Path,
    dir: &Path,
    f: &mut dyn FnMut(&Path, String) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        if path.is_dir() {
            if dir == root && SKIP_DIRS.contains(&name.as_ref()) {
                continue;
            }
            walk(root, &path, f)?;
        } else if is_rule_file(&rel) {
            f(&path, rel)?;
        }
    }
    Ok(())
}

/// Every `*.json` sample below `dir`, sorted by path; every file's problem when any fails.
pub fn read_samples(dir: &Path) -> Result<Vec<Sample>, String> {
    let mut files = Vec::new();
    collect_json(dir, &mut files).map_err(|e| format!("{}: {e}", dir.display()))?;
    files.sort();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        match Sample::parse(&f.display().to_string(), &text) {
            Ok(s) => out.push(s),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("\n"))
    }
}

fn collect_json(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect_json(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// A recorded-traffic file: one decision per line as the decision explorer returns it
/// (`GET /admin/v1/decisions` items, `rampart-rules record`), oldest first after sorting by time.
/// Blank lines are skipped; a line that is not a JSON object is an error naming its line.
pub fn read_traffic(path: &Path) -> Result<Vec<Recorded>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        if !v.is_object() {
            return Err(format!(
                "{}:{}: not a JSON object (one decision per line)",
                path.display(),
                i + 1
            ));
        }
        rows.push(Recorded::from_row(&v));
    }
    rows.sort_by(|a, b| (a.time_ms, &a.decision_id).cmp(&(b.time_ms, &b.decision_id)));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_rules_and_samples_read() {
        let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../rules");
        let sources = read_sources(&root).unwrap();
        assert!(sources.iter().any(|s| s.path == "edge/waf-sqli.rhai"));
        assert!(sources.iter().all(|s| !s.path.starts_with("samples/")));
        assert!(sources.iter().all(|s| s.path != "README.md"));
        assert!(read_samples(&root.join("samples")).unwrap().len() > 100);
    }

    #[test]
    fn traffic_lines_are_sorted_and_bad_lines_located() {
        let dir = std::env::temp_dir().join(format!("rampart-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.jsonl");
        std::fs::write(
            &p,
            "{\"decision_id\":\"b\",\"time_ms\":2,\"action\":\"deny\",\"code\":\"RULE_DENY\"}\n\n\
             {\"decision_id\":\"a\",\"time_ms\":1,\"action\":\"allow\",\"code\":\"OK\"}\n",
        )
        .unwrap();
        let rows = read_traffic(&p).unwrap();
        assert_eq!(rows[0].decision_id, "a");
        assert_eq!(rows[1].code, "RULE_DENY");
        std::fs::write(&p, "{}\n[1]\n").unwrap();
        assert!(read_traffic(&p)
            .unwrap_err()
            .ends_with("t.jsonl:2: not a JSON object (one decision per line)"));
        std::fs::write(&p, "{\n").unwrap();
        assert!(read_traffic(&p).unwrap_err().contains("t.jsonl:1: "));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
