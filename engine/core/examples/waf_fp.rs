//! Runs `waf_value` over a file of benign values, one per line, and prints the ones flagged.
//!
//! `cargo run --release -p rampart-core --example waf_fp -- values.txt`

fn main() {
    let path = std::env::args().nth(1).expect("usage: waf_fp FILE");
    let text = std::fs::read_to_string(path).expect("readable file");
    let (mut total, mut flagged) = (0, 0);
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        total += 1;
        if let Some(a) = rampart_core::waf::scan_value(line) {
            flagged += 1;
            println!("{:<10} {line}", a.as_str());
        }
    }
    println!("{flagged}/{total} flagged");
}
