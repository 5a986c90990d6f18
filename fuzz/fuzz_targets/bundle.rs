//! Rule bundle parsing and verification on hostile input: never a panic, and nothing verifies
//! under the trusted key except the exact files and manifest it signed. Input byte 0 selects the
//! mode: 0 parses the rest as a whole document; any other value overwrites the valid signed
//! bundle at a position chosen by that byte with the rest (tampering close to a real bundle).
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rampart_core::lifecycle::bundle::{Bundle, FileHash, Origin, PublicKey, SecretKey};

struct Fixture {
    doc: Vec<u8>,
    signed: Bundle,
    key: PublicKey,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let files: BTreeMap<String, String> = [
            ("edge/a.rhai", "//! name: a\n//! priority: 1\n//! owner: o\n//! description: d\ndeny(\"x\")\n"),
            ("lists/l.txt", "one\ntwo\n"),
        ]
        .into_iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
        let key = SecretKey::from_seed([7; 32]);
        let mut signed = Bundle::new(files, 1, "m", Origin::default(), "fuzz");
        signed.sign(&key);
        Fixture {
            doc: serde_json::to_vec(&signed).unwrap(),
            signed,
            key: key.public("ci"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let doc = match data.split_first() {
        None => return,
        Some((0, rest)) => rest.to_vec(),
        Some((&at, rest)) => {
            let mut d = f.doc.clone();
            let at = at as usize * d.len() / 256;
            let n = rest.len().min(d.len() - at);
            d[at..at + n].copy_from_slice(&rest[..n]);
            d
        }
    };
    let Ok(b) = Bundle::parse(&doc) else { return };
    for allow_unsigned in [false, true] {
        let Ok(v) = b.verify(std::slice::from_ref(&f.key), allow_unsigned) else {
            continue;
        };
        // Whatever passes matches its manifest exactly...
        assert_eq!(v.manifest.files.len(), b.files.len());
        for (path, hash) in &v.manifest.files {
            assert_eq!(FileHash::of(&b.files[path]), *hash);
        }
        // ...and a signed pass is the signed content itself.
        if v.signed_by.is_some() {
            assert_eq!(b.manifest, f.signed.manifest);
            assert_eq!(b.files, f.signed.files);
        }
    }
});
