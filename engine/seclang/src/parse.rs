//! SecLang text → directives: line continuations, comments, quoted arguments and action lists.
//!
//! Only the syntax is read here; what a directive means is decided by `compile`.

use crate::Error;

/// One directive of a configuration file, with where it started.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub file: String,
    pub line: usize,
}

/// Splits a file into directives. A line ending in `\` continues on the next one; `#` starts a
/// comment only at the beginning of a (joined) line.
pub fn directives(file: &str, text: &str) -> Result<Vec<Directive>, Error> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut start = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        if buf.is_empty() {
            start = i + 1;
            let t = line.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
        }
        let trimmed = line.trim_end();
        if let Some(head) = trimmed.strip_suffix('\\') {
            buf.push_str(head);
            continue;
        }
        buf.push_str(line);
        let joined = std::mem::take(&mut buf);
        if let Some(d) = directive(file, start, &joined)? {
            out.push(d);
        }
    }
    if !buf.is_empty() {
        if let Some(d) = directive(file, start, &buf)? {
            out.push(d);
        }
    }
    Ok(out)
}

fn directive(file: &str, line: usize, text: &str) -> Result<Option<Directive>, Error> {
    let err = |m: String| Error::at(file, line, m);
    let mut words = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        if b[i] == b'"' || b[i] == b'\'' {
            let q = b[i];
            i += 1;
            let mut w = Vec::new();
            let mut closed = false;
            while i < b.len() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    if b[i + 1] == q {
                        w.push(q);
                    } else {
                        w.push(b'\\');
                        w.push(b[i + 1]);
                    }
                    i += 2;
                    continue;
                }
                if b[i] == q {
                    closed = true;
                    i += 1;
                    break;
                }
                w.push(b[i]);
                i += 1;
            }
            if !closed {
                return Err(err("unterminated quoted argument".into()));
            }
            words.push(String::from_utf8_lossy(&w).into_owned());
        } else {
            let s = i;
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            words.push(text[s..i].to_string());
        }
    }
    if words.is_empty() {
        return Ok(None);
    }
    let name = words.remove(0);
    Ok(Some(Directive {
        name,
        args: words,
        file: file.to_string(),
        line,
    }))
}

/// One action of an action list: `name` or `name:value` (the value's single quotes removed).
#[derive(Debug, Clone, PartialEq)]
pub struct RawAction {
    pub name: String,
    pub value: Option<String>,
}

/// Splits `id:1,phase:2,msg:'a, b',t:none` into actions. Commas inside single quotes do not split.
pub fn actions(text: &str) -> Result<Vec<RawAction>, String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let s = i;
        while i < b.len() && b[i] != b':' && b[i] != b',' {
            i += 1;
        }
        let name = text[s..i].trim().to_string();
        if name.is_empty() {
            return Err(format!("empty action name in '{text}'"));
        }
        let mut value = None;
        if i < b.len() && b[i] == b':' {
            i += 1;
            while i < b.len() && b[i] == b' ' {
                i += 1;
            }
            let mut v = Vec::new();
            if i < b.len() && b[i] == b'\'' {
                i += 1;
                let mut closed = false;
                while i < b.len() {
                    if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\'' {
                        v.push(b'\'');
                        i += 2;
                        continue;
                    }
                    if b[i] == b'\'' {
                        closed = true;
                        i += 1;
                        break;
                    }
                    v.push(b[i]);
                    i += 1;
                }
                if !closed {
                    return Err(format!("unterminated quote in action '{name}'"));
                }
                // Anything up to the next comma belongs to nothing (e.g. stray spaces).
                while i < b.len() && b[i] != b',' {
                    i += 1;
                }
            } else {
                while i < b.len() && b[i] != b',' {
                    v.push(b[i]);
                    i += 1;
                }
                while v.last().is_some_and(|c| c.is_ascii_whitespace()) {
                    v.pop();
                }
            }
            value = Some(String::from_utf8_lossy(&v).into_owned());
        }
        out.push(RawAction { name, value });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_comments_and_quotes() {
        let text = "# comment\nSecRule ARGS \"@rx a\\\"b\" \\\n    \"id:1,\\\n    phase:2,msg:'x, y'\"\n\nSecMarker END\n";
        let d = directives("f.conf", text).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].name, "SecRule");
        assert_eq!(d[0].args[0], "ARGS");
        assert_eq!(d[0].args[1], "@rx a\"b");
        assert_eq!(d[0].line, 2);
        assert_eq!(d[1].args, vec!["END".to_string()]);
        let a = actions(&d[0].args[2]).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[2].value.as_deref(), Some("x, y"));
    }

    #[test]
    fn backslashes_other_than_an_escaped_quote_are_kept() {
        let d = directives("f", r#"SecRule ARGS "@rx \d+\\/" "id:2""#).unwrap();
        assert_eq!(d[0].args[1], r"@rx \d+\\/");
    }

    #[test]
    fn unterminated_quotes_are_errors() {
        assert!(directives("f", "SecRule ARGS \"@rx a").is_err());
        assert!(actions("msg:'abc").is_err());
    }

    #[test]
    fn action_values_with_quotes_and_escapes() {
        let a =
            actions("setvar:'tx.a=+%{tx.b}',ctl:ruleRemoveTargetById=942100;ARGS:x,msg:'it\\'s'")
                .unwrap();
        assert_eq!(a[0].value.as_deref(), Some("tx.a=+%{tx.b}"));
        assert_eq!(
            a[1].value.as_deref(),
            Some("ruleRemoveTargetById=942100;ARGS:x")
        );
        assert_eq!(a[2].value.as_deref(), Some("it's"));
    }
}
