//! Embeds the default rule set (`rules/` at the workspace root, without `samples/`) into the
//! binary, so `rampart serve` without a configuration runs the same rules the repository ships.

#[path = "src/console/files.rs"]
mod console_files;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("below the root")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        if path.is_dir() {
            if dir == root && name == "samples" {
                continue;
            }
            walk(root, &path, out);
        } else if !(dir == root && name.ends_with(".md")) {
            out.push((rel, path));
        }
    }
}

fn main() {
    // The manifest directory of this build (read when the script runs: a build script compiled
    // for another checkout sharing the target directory must not embed that checkout's rules).
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../../rules");
    let root = root.canonicalize().unwrap_or(root);
    let mut files = Vec::new();
    for tier in ["edge", "gateway", "business", "lists"] {
        println!("cargo:rerun-if-changed={}", root.join(tier).display());
        walk(&root, &root.join(tier), &mut files);
    }
    let mut code = String::from("/// The default rule set: (path relative to `rules/`, text).\npub static DEFAULT_RULES: &[(&str, &str)] = &[\n");
    for (rel, path) in &files {
        let _ = writeln!(
            code,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    code.push_str("];\n");
    assert!(
        files.iter().any(|(rel, _)| rel.ends_with(".rhai")),
        "no rules under {}: the default rule set would be empty",
        root.display()
    );
    // The repository's samples, so the regression endpoint has them on the embedded defaults.
    let samples = root.join("samples");
    println!("cargo:rerun-if-changed={}", samples.display());
    let mut sample_files = Vec::new();
    walk(&samples, &samples, &mut sample_files);
    code.push_str("/// The default samples: (path relative to `rules/samples/`, text).\npub static DEFAULT_SAMPLES: &[(&str, &str)] = &[\n");
    for (rel, path) in sample_files.iter().filter(|(r, _)| r.ends_with(".json")) {
        let _ = writeln!(
            code,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    code.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out_dir.join("default_rules.rs"), code).expect("write default_rules.rs");
    std::fs::write(
        out_dir.join("console_assets.rs"),
        console_assets(&Path::new(&manifest).join("../../admin-ui/dist")),
    )
    .expect("write console_assets.rs");
}

/// The console as built by trunk into `admin-ui/dist` (by `scripts/console.sh`), embedded so one
/// binary serves it. Absent → an empty table, and `/console/` says how to build it. The inline
/// bootstrap scripts trunk writes into `index.html` are allowed by their SHA-256 in the
/// Content-Security-Policy, so no `'unsafe-inline'` is needed.
fn console_assets(dist: &Path) -> String {
    println!("cargo:rerun-if-changed={}", dist.display());
    let dist = dist.canonicalize().unwrap_or_else(|_| dist.to_path_buf());
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        println!(
            "cargo:rerun-if-changed={}",
            dist.join("index.html").display()
        );
        walk(&dist, &dist, &mut files);
    }
    let mut code = String::from(
        "/// A console file: path relative to `dist/`, content type, bytes, the bytes gzipped \
         when smaller.\n\
         pub type ConsoleFile = (&'static str, &'static str, &'static [u8], Option<&'static [u8]>);\n\
         /// The console's files.\n\
         pub static CONSOLE_FILES: &[ConsoleFile] = &[\n",
    );
    for (rel, path) in files.iter().filter(|(rel, _)| !rel.ends_with(".gz")) {
        // The gzipped twin `scripts/console.sh` writes, when it is not older than the file (a
        // stale one would serve other bytes) and actually smaller.
        let gz = PathBuf::from(format!("{}.gz", path.display()));
        let size = |p: &Path| std::fs::metadata(p).ok();
        let gz = match (size(path), size(&gz)) {
            (Some(f), Some(g)) if g.len() < f.len() && g.modified().ok() >= f.modified().ok() => {
                format!("Some(include_bytes!({:?}))", gz.display().to_string())
            }
            _ => "None".into(),
        };
        let _ = writeln!(
            code,
            "    ({rel:?}, {:?}, include_bytes!({:?}), {gz}),",
            console_files::mime(rel),
            path.display().to_string()
        );
    }
    code.push_str("];\n");
    let html = std::fs::read_to_string(dist.join("index.html")).unwrap_or_default();
    let _ = writeln!(
        code,
        "/// `script-src` sources for the inline scripts of the console's index.html.\n\
         pub static CONSOLE_SCRIPT_HASHES: &str = {:?};",
        console_files::inline_script_hashes(&html)
    );
    code
}
