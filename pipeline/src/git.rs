//! The little the pipeline needs from git, through the `git` command: a rule directory as it is at
//! a ref, and where the working tree comes from (for the bundle's signed origin).

use std::path::{Path, PathBuf};
use std::process::Command;

use rampart_core::lifecycle::bundle::Origin;
use rampart_core::rules::Source;

fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

fn git_text(dir: &Path, args: &[&str]) -> Result<String, String> {
    Ok(String::from_utf8_lossy(&git(dir, args)?).trim().to_string())
}

/// The repository's top directory and `dir`'s path inside it (`/`-separated, no trailing `/`).
fn locate(dir: &Path) -> Result<(PathBuf, String), String> {
    let top = PathBuf::from(git_text(dir, &["rev-parse", "--show-toplevel"])?);
    let abs = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let top = top.canonicalize().unwrap_or(top);
    let rel = abs
        .strip_prefix(&top)
        .map_err(|_| format!("{} is not inside {}", abs.display(), top.display()))?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    Ok((top, rel))
}

/// The rule set under `dir` as it is at `reference` (a branch, tag, commit or `HEAD~1`): the same
/// files [`rampart_files::read_sources`] would read from a checkout of it.
pub fn sources_at(dir: &Path, reference: &str) -> Result<Vec<Source>, String> {
    if reference.starts_with('-') {
        return Err(format!("{reference:?} is not a git ref"));
    }
    let (top, rel) = locate(dir)?;
    let commit = git_text(
        &top,
        &["rev-parse", "--verify", &format!("{reference}^{{commit}}")],
    )
    .map_err(|_| format!("{reference:?} is neither a directory nor a git ref"))?;
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let listing = git(
        &top,
        &["ls-tree", "-r", "-z", "--name-only", &commit, "--", &prefix],
    )?;
    let mut out = Vec::new();
    for path in listing.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let path = String::from_utf8_lossy(path).into_owned();
        let inner = path.strip_prefix(&prefix).unwrap_or(&path).to_string();
        if !rampart_files::is_rule_file(&inner) {
            continue;
        }
        let blob = git(&top, &["show", &format!("{commit}:{path}")])?;
        let text =
            String::from_utf8(blob).map_err(|_| format!("{path} at {reference}: not UTF-8"))?;
        out.push(Source { path: inner, text });
    }
    if out.is_empty() {
        return Err(format!("no rule files under {prefix:?} at {reference}"));
    }
    Ok(out)
}

/// Where the working tree of `dir` comes from; empty when `dir` is not in a git repository.
pub fn origin(dir: &Path) -> Origin {
    let Ok((top, rel)) = locate(dir) else {
        return Origin::default();
    };
    let text = |args: &[&str]| git_text(&top, args).ok().filter(|s| !s.is_empty());
    let pathspec = if rel.is_empty() { ".".to_string() } else { rel };
    Origin {
        repository: text(&["remote", "get-url", "origin"])
            .map(|u| rampart_core::redact::strip_credentials(&u)),
        reference: text(&["rev-parse", "--abbrev-ref", "HEAD"]).filter(|r| r != "HEAD"),
        commit: text(&["rev-parse", "HEAD"]),
        dirty: text(&["status", "--porcelain", "--", &pathspec]).is_some(),
    }
}
