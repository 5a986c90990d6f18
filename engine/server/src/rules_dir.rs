//! Reading a rule set from a directory, and noticing when it changes.

use std::hash::{Hash, Hasher};
use std::path::Path;

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
        } else if !(dir == root && name.ends_with(".md")) {
            f(&path, rel)?;
        }
    }
    Ok(())
}
