//! What the console's files need to be served: content types and the hashes of index.html's
//! inline scripts. Shared by the build script (which embeds `admin-ui/dist`) and the server (which
//! can serve a directory instead, for console development: `RAMPART_CONSOLE_DIR`).

/// The content type of a console file, by extension (`mime_guess`'s table; unknown extensions are
/// `application/octet-stream`). Text is served as UTF-8, as trunk writes it.
pub fn mime(name: &str) -> std::borrow::Cow<'static, str> {
    match mime_guess::from_path(name).first_raw() {
        Some(text) if text.starts_with("text/") => format!("{text}; charset=utf-8").into(),
        Some(other) => other.into(),
        None => "application/octet-stream".into(),
    }
}

/// `'sha256-…'` sources for every inline `<script>` of `html`, for `script-src`.
pub fn inline_script_hashes(html: &str) -> String {
    use base64ct::Encoding as _;
    use sha2::Digest as _;
    let mut hashes = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("<script") {
        rest = &rest[i..];
        let Some(end_tag) = rest.find('>') else { break };
        let tag = &rest[..end_tag];
        let body_start = end_tag + 1;
        let Some(close) = rest[body_start..].find("</script>") else {
            break;
        };
        let body = &rest[body_start..body_start + close];
        if !tag.contains("src=") && !body.trim().is_empty() {
            let digest = sha2::Sha256::digest(body.as_bytes());
            hashes.push(format!(
                "'sha256-{}'",
                base64ct::Base64::encode_string(&digest)
            ));
        }
        rest = &rest[body_start + close..];
    }
    hashes.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn console_files_keep_their_content_types() {
        for (name, want) in [
            ("index.html", "text/html; charset=utf-8"),
            (
                "rampart-console-b10f30efe83875a3.js",
                "text/javascript; charset=utf-8",
            ),
            (
                "rampart-console-b10f30efe83875a3_bg.wasm",
                "application/wasm",
            ),
            ("style-4ab680c62d75bbf8.css", "text/css; charset=utf-8"),
            ("logo.svg", "image/svg+xml"),
            ("logo.png", "image/png"),
            ("favicon.ico", "image/x-icon"),
            ("manifest.json", "application/json"),
            ("robots.txt", "text/plain; charset=utf-8"),
            ("LICENSE", "application/octet-stream"),
            ("data.unknown-extension", "application/octet-stream"),
        ] {
            assert_eq!(super::mime(name), want, "{name}");
        }
    }
}
