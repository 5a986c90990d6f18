//! Named lists that rules test membership against, built once per rule set.
//!
//! - [`IpList`]: IPv4/IPv6 addresses and CIDR blocks, merged into sorted, non-overlapping ranges
//!   (IPv4 mapped into the IPv6 space), so a lookup is one binary search: O(log n), no allocation.
//! - [`StringList`]: exact members in a hash set, plus substring search for all members at once with
//!   an Aho-Corasick automaton (one pass over the value, whatever the list's size; ASCII
//!   case-insensitive, which is what user-agent and keyword lists want).

use crate::memo::Memo;
use std::collections::HashSet;
use std::net::IpAddr;

/// A set of IP addresses and CIDR blocks.
#[derive(Debug, Clone, Default)]
pub struct IpList {
    /// Sorted, merged, inclusive ranges over the IPv6 space (IPv4 as `::ffff:a.b.c.d`).
    ranges: Vec<(u128, u128)>,
}

fn to_v6_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Parses `a.b.c.d`, `a.b.c.d/n`, `x::y` or `x::y/n` into an inclusive range.
pub fn parse_cidr(s: &str) -> Result<(u128, u128), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an IP address or CIDR block"))?;
    let (bits, max, offset) = match ip {
        IpAddr::V4(_) => (to_v6_bits(ip), 32u32, 96u32),
        IpAddr::V6(_) => (to_v6_bits(ip), 128, 0),
    };
    let prefix = match len {
        None => max,
        Some(l) => l
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("{s:?}: prefix length must be 0–{max}"))?,
    };
    let host_bits = max - prefix;
    let mask: u128 = if host_bits == 0 {
        0
    } else {
        (1u128 << host_bits) - 1
    };
    let _ = offset;
    Ok((bits & !mask, bits | mask))
}

impl IpList {
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for e in entries {
            ranges.push(parse_cidr(e)?);
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        Ok(IpList { ranges: merged })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let x = to_v6_bits(ip);
        // The last range starting at or below x.
        let i = self.ranges.partition_point(|(lo, _)| *lo <= x);
        i > 0 && self.ranges[i - 1].1 >= x
    }

    /// Parses `ip` first; a value that is not an IP is never a member.
    pub fn contains_str(&self, ip: &str) -> bool {
        ip.parse().map(|ip| self.contains(ip)).unwrap_or(false)
    }

    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }
}

/// A set of strings.
#[derive(Debug, Clone, Default)]
pub struct StringList {
    members: HashSet<Box<str>>,
    ordered: Vec<Box<str>>,
    automaton: Option<aho_corasick::AhoCorasick>,
    /// Unique per built list (clones share it): keys the per-thread cache of substring answers.
    id: u64,
}

/// Values at least this long have their substring answers cached: a few hundred user agents make
/// up most traffic, and scanning one (about 100 bytes) through a large automaton costs a
/// microsecond under load, against a hash of the value for a cached answer.
const CACHED_MIN_LEN: usize = 16;
/// Longer values are scanned every time (a cache of them would hold too much memory).
const CACHED_MAX_LEN: usize = 256;
/// Lists with a cache per thread: the newest ones (a swapped-out rule set's lists fall out).
const CACHED_LISTS: usize = 8;

/// A list's id and its cached answers by value.
type ListAnswers = (u64, Memo<bool>);

thread_local! {
    /// Per list id, the answers of `contains_any` by value.
    static ANY_CACHE: std::cell::RefCell<Vec<ListAnswers>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn next_list_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl StringList {
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let mut members = HashSet::new();
        let mut ordered = Vec::new();
        for e in entries {
            if members.insert(Box::<str>::from(e)) {
                ordered.push(Box::<str>::from(e));
            }
        }
        let automaton = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(ordered.iter().map(|m| m.as_bytes()))
            .ok()
            .filter(|_| !ordered.is_empty());
        StringList {
            members,
            ordered,
            automaton,
            id: next_list_id(),
        }
    }

    pub fn contains(&self, s: &str) -> bool {
        self.members.contains(s)
    }

    /// True when `haystack` contains any member as a substring (ASCII case-insensitive).
    pub fn contains_any(&self, haystack: &str) -> bool {
        let Some(a) = &self.automaton else {
            return false;
        };
        if !(CACHED_MIN_LEN..=CACHED_MAX_LEN).contains(&haystack.len()) {
            return a.is_match(haystack.as_bytes());
        }
        // Keyed by the whole value (no hash-collision risk), per list.
        ANY_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let i = match c.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    if c.len() >= CACHED_LISTS {
                        c.remove(0);
                    }
                    c.push((self.id, Memo::new(&crate::memo::LIST_ANSWERS)));
                    c.len() - 1
                }
            };
            let answers = &mut c[i].1;
            if let Some(hit) = answers.get(haystack) {
                return hit;
            }
            let hit = a.is_match(haystack.as_bytes());
            answers.insert(haystack, hit);
            hit
        })
    }

    pub fn len(&self) -> usize {
        self.ordered.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ordered.is_empty()
    }
}

/// Entries of a list file: one per line, `#` starts a comment, blank lines ignored.
pub fn list_entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_list_matches_addresses_and_blocks() {
        let l = IpList::from_entries(["10.0.0.0/8", "192.168.1.7", "10.1.0.0/16", "2001:db8::/32"])
            .unwrap();
        assert_eq!(l.ranges(), 3, "10.1/16 merges into 10/8");
        for ip in ["10.0.0.0", "10.255.255.255", "192.168.1.7", "2001:db8::1"] {
            assert!(l.contains_str(ip), "{ip}");
        }
        for ip in [
            "11.0.0.0",
            "9.255.255.255",
            "192.168.1.8",
            "2001:db9::1",
            "::1",
            "nonsense",
        ] {
            assert!(!l.contains_str(ip), "{ip}");
        }
        assert!(IpList::from_entries(["10.0.0.0/33"]).is_err());
        assert!(IpList::from_entries(["300.1.1.1"]).is_err());
        let all = IpList::from_entries(["0.0.0.0/0"]).unwrap();
        assert!(all.contains_str("8.8.8.8") && !all.contains_str("::2"));
    }

    #[test]
    fn string_list() {
        let l = StringList::from_entries(list_entries(
            "# scanners\nsqlmap\nnikto  # comment\n\nnikto\n",
        ));
        assert_eq!(l.len(), 2);
        assert!(l.contains("sqlmap"));
        assert!(l.contains_any("Mozilla/5.0 sqlmap/1.7"));
        assert!(l.contains_any("Mozilla/5.0 SQLMap/1.7"));
        assert!(!l.contains_any("Mozilla/5.0"));
    }

    /// Answers come from a per-thread cache for values of 16–256 bytes: asked again, by another
    /// list, past the cache's size and past its list count, they are the automaton's.
    #[test]
    fn cached_substring_answers_are_the_automatons() {
        let scanners = StringList::from_entries(["sqlmap", "nikto"]);
        let browsers = StringList::from_entries(["mozilla"]);
        let values = [
            "Mozilla/5.0 (X11; Linux x86_64) sqlmap/1.7",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/120",
            "curl/8.0 nikto scan please",
        ];
        for round in 0..3 {
            for v in values {
                let by_automaton =
                    |l: &StringList| l.automaton.as_ref().unwrap().is_match(v.as_bytes());
                assert_eq!(
                    scanners.contains_any(v),
                    by_automaton(&scanners),
                    "{round} {v}"
                );
                assert_eq!(
                    browsers.contains_any(v),
                    by_automaton(&browsers),
                    "{round} {v}"
                );
            }
        }
        assert!(scanners.contains_any(values[0]) && !scanners.contains_any(values[1]));
        assert!(browsers.contains_any(values[1]) && !browsers.contains_any(values[2]));
        // Past the cache's size (it starts over) and with more lists than it keeps.
        for i in 0..(crate::memo::LIST_ANSWERS.bound() + 10) {
            let v = format!("Mozilla/5.0 client number {i:08}");
            assert!(!scanners.contains_any(&v));
            assert!(browsers.contains_any(&v));
        }
        let others: Vec<StringList> = (0..CACHED_LISTS + 2)
            .map(|_| StringList::from_entries(["firefox"]))
            .collect();
        for l in &others {
            assert!(l.contains_any(values[1]) && !l.contains_any(values[0]));
        }
        assert!(scanners.contains_any(values[2]) && !scanners.contains_any(values[1]));
    }
}
