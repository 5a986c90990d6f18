//! What the console's files need to be served: content types and the hashes of index.html's
//! inline scripts. Shared by the build script (which embeds `admin-ui/dist`) and the server (which
//! can serve a directory instead, for console development: `RAMPART_CONSOLE_DIR`).

/// The content type of a console file, by extension.
pub fn mime(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
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
