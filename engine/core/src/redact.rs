//! Keeping credentials out of what is shown, logged or signed.

/// `https://user:token@host/x` → `https://host/x`: a URL may carry a password or a token
/// (a git remote with a CI token, `redis://:password@host`, a ClickHouse URL).
pub fn strip_credentials(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            return format!("{scheme}://{}", &rest[at + 1..]);
        }
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_cut_from_remote_urls() {
        assert_eq!(
            strip_credentials("https://ci:tok@git.example/rules.git"),
            "https://git.example/rules.git"
        );
        assert_eq!(
            strip_credentials("https://git.example/a@b/rules.git"),
            "https://git.example/a@b/rules.git"
        );
        assert_eq!(
            strip_credentials("git@git.example:rules.git"),
            "git@git.example:rules.git"
        );
    }
}
