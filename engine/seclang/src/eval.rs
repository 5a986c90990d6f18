//! One transaction: the request's collections, the TX collection, and the walk over the rules of
//! phases 1 and 2 with chains, `skipAfter`, `ctl` exclusions, captures and `setvar`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

use crate::body::{self, Pairs};
use crate::compile::{Ctl, Disruptive, Item, Rule, SetVar};
use crate::ops::{self, NumOp, Op, Param, Part};
use crate::vars::{Selector, Target, Var};
use crate::{Matched, Outcome, Request, Ruleset};

/// Where a value lives: a keyed collection's member, a single variable, or a copy (TX and
/// MATCHED_VARS change while rules run, so they are read as copies).
enum Ref {
    Slot(Var, u32),
    Copy(Vec<u8>, Vec<u8>),
}

const N_VARS: usize = Var::Unsupported as usize + 1;

/// Attribute values of an XML body live in the `Unsupported` slot, which no rule reads.
const XML_ATTRS: Var = Var::Unsupported;

pub(crate) struct Tx<'r> {
    rs: &'r Ruleset,
    args: Pairs,
    get_len: usize,
    headers: Pairs,
    cookies: Pairs,
    files: Pairs,
    part_headers: Pairs,
    /// XML text nodes (`XML:/*`) and attribute values (`XML://@*`), keyed by nothing.
    xml: Pairs,
    xml_attrs: Pairs,
    singles: Vec<Vec<u8>>,
    tx: HashMap<Vec<u8>, Vec<u8>>,
    matched_var: Vec<u8>,
    matched_var_name: Vec<u8>,
    matched_vars: Pairs,
    removed_ids: Vec<(u32, u32)>,
    removed_tags: Vec<String>,
    removed_targets: Vec<(Option<Vec<(u32, u32)>>, Option<String>, Var, Selector)>,
    cache: HashMap<(u32, u32, u32), Rc<[u8]>>,
    rule_id: u32,
    rule_msg: Vec<u8>,
    out: Outcome,
    stop: bool,
}

fn lower(s: &[u8]) -> Vec<u8> {
    s.to_ascii_lowercase()
}

impl<'r> Tx<'r> {
    pub(crate) fn new(rs: &'r Ruleset, req: &Request<'_>) -> Tx<'r> {
        let mut singles = vec![Vec::new(); N_VARS];
        let uri = req.uri.as_bytes();
        let (path, query) = match uri.iter().position(|&c| c == b'?') {
            Some(p) => (&uri[..p], &uri[p + 1..]),
            None => (uri, &b""[..]),
        };
        let path = match path.iter().position(|&c| c == b'#') {
            Some(p) => &path[..p],
            None => path,
        };
        let mut args = Pairs::new();
        body::urlencoded(query, &mut args);
        let get_len = args.len();
        let mut headers = Pairs::new();
        let mut cookies = Pairs::new();
        let mut ctype = String::new();
        let mut ctype_raw = "";
        for (k, v) in &req.headers {
            headers.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
            if k.eq_ignore_ascii_case("cookie") {
                body::cookies(v.as_bytes(), &mut cookies);
            } else if k.eq_ignore_ascii_case("content-type") {
                ctype = v.to_ascii_lowercase();
                ctype_raw = v;
            }
        }
        let mut files = Pairs::new();
        let mut part_headers = Pairs::new();
        let mut xml = Pairs::new();
        let mut xml_attrs = Pairs::new();
        let b = req.body;
        let mut processor: &[u8] = b"";
        if !b.is_empty() {
            let looks_json = matches!(
                b.iter().find(|c| !c.is_ascii_whitespace()),
                Some(b'{') | Some(b'[')
            );
            if ctype.starts_with("multipart/") {
                processor = b"MULTIPART";
                let m = body::multipart(ctype_raw, b);
                args.extend(m.args);
                files = m.files;
                part_headers = m
                    .part_headers
                    .into_iter()
                    .map(|h| {
                        let n = h.iter().position(|&c| c == b':').unwrap_or(h.len());
                        (h[..n].to_vec(), h)
                    })
                    .collect();
                if m.strict_error {
                    singles[Var::MultipartStrictError as usize] = b"1".to_vec();
                }
            } else if ctype.contains("json") || (ctype.is_empty() && looks_json) {
                processor = b"JSON";
                if !body::json(b, &mut args) {
                    singles[Var::ReqbodyError as usize] = b"1".to_vec();
                    singles[Var::ReqbodyErrorMsg as usize] = b"JSON parsing error".to_vec();
                }
            } else if ctype.contains("xml") {
                processor = b"XML";
                match body::xml(b) {
                    Some((t, a)) => {
                        xml = t.into_iter().map(|v| (Vec::new(), v)).collect();
                        xml_attrs = a.into_iter().map(|v| (Vec::new(), v)).collect();
                    }
                    None => {
                        singles[Var::ReqbodyError as usize] = b"1".to_vec();
                        singles[Var::ReqbodyErrorMsg as usize] = b"XML parsing error".to_vec();
                    }
                }
            } else if ctype.starts_with("application/x-www-form-urlencoded") || ctype.is_empty() {
                processor = b"URLENCODED";
                body::urlencoded(b, &mut args);
            }
        }
        for v in [
            Var::MultipartStrictError,
            Var::MultipartUnmatchedBoundary,
            Var::ReqbodyError,
        ] {
            if singles[v as usize].is_empty() {
                singles[v as usize] = b"0".to_vec();
            }
        }
        singles[Var::ReqbodyProcessor as usize] = processor.to_vec();
        let basename = match path.iter().rposition(|&c| c == b'/' || c == b'\\') {
            Some(p) if p + 1 < path.len() => &path[p + 1..],
            _ => path,
        };
        // The path as the application sees it: percent-decoded (a `+` stays a `+`).
        singles[Var::RequestFilename as usize] = percent_decode(path);
        singles[Var::RequestBasename as usize] = percent_decode(basename);
        singles[Var::RequestUri as usize] = uri.to_vec();
        singles[Var::RequestUriRaw as usize] = uri.to_vec();
        singles[Var::QueryString as usize] = query.to_vec();
        singles[Var::RequestMethod as usize] = req.method.as_bytes().to_vec();
        singles[Var::RequestProtocol as usize] = req.protocol.as_bytes().to_vec();
        singles[Var::RequestLine as usize] =
            format!("{} {} {}", req.method, req.uri, req.protocol).into_bytes();
        // As in ModSecurity, the raw body is a variable only where no structured processor read
        // it (URL-encoded forms, unknown types); JSON, XML and multipart bodies are read as ARGS,
        // XML and FILES.
        if processor == b"URLENCODED" || processor.is_empty() {
            singles[Var::RequestBody as usize] = b.to_vec();
        }
        singles[Var::RequestBodyLength as usize] = b.len().to_string().into_bytes();
        singles[Var::RemoteAddr as usize] = req.remote_addr.as_bytes().to_vec();
        singles[Var::UniqueId as usize] = b"0".to_vec();
        let combined: usize = args.iter().map(|(k, v)| k.len() + v.len()).sum();
        singles[Var::ArgsCombinedSize as usize] = combined.to_string().into_bytes();
        singles[Var::FilesCombinedSize as usize] = b"0".to_vec();
        Tx {
            rs,
            args,
            get_len,
            headers,
            cookies,
            files,
            part_headers,
            xml,
            xml_attrs,
            singles,
            tx: HashMap::new(),
            matched_var: Vec::new(),
            matched_var_name: Vec::new(),
            matched_vars: Pairs::new(),
            removed_ids: Vec::new(),
            removed_tags: Vec::new(),
            removed_targets: Vec::new(),
            cache: HashMap::new(),
            rule_id: 0,
            rule_msg: Vec::new(),
            out: Outcome::default(),
            stop: false,
        }
    }

    pub(crate) fn run(mut self) -> Outcome {
        for phase in 0..2 {
            let items = &self.rs.compiled.phases[phase];
            let mut i = 0;
            while i < items.len() && !self.stop {
                let Item::Rule(r) = &items[i] else {
                    i += 1;
                    continue;
                };
                i += 1;
                if !self.rule(r) {
                    continue;
                }
                if let Some(target) = &r.skip_after {
                    i = skip_after(items, i, target);
                } else if r.skip > 0 {
                    let mut n = r.skip;
                    while n > 0 && i < items.len() {
                        if matches!(items[i], Item::Rule(_)) {
                            n -= 1;
                        }
                        i += 1;
                    }
                }
            }
            if self.stop {
                break;
            }
        }
        let score = [
            "blocking_inbound_anomaly_score",
            "anomaly_score",
            "inbound_anomaly_score",
        ]
        .iter()
        .map(|k| self.tx.get(k.as_bytes()).map(|v| ops::num(v)).unwrap_or(0))
        .max()
        .unwrap_or(0);
        self.out.score = score;
        self.out
    }

    fn removed(&self, r: &Rule) -> bool {
        self.removed_ids
            .iter()
            .any(|&(a, b)| r.id >= a && r.id <= b)
            || self.removed_tags.iter().any(|t| r.tags.contains(t))
    }

    /// Evaluates a rule and its chain; on a full match runs its actions. True if it matched.
    fn rule(&mut self, r: &Rule) -> bool {
        if r.id != 0 && self.removed(r) {
            return false;
        }
        self.rule_id = r.id;
        self.matched_vars.clear();
        if !self.one(r, r) {
            return false;
        }
        let mut m = r.chain.as_deref();
        while let Some(c) = m {
            if !self.one(c, r) {
                return false;
            }
            m = c.chain.as_deref();
        }
        if r.severity.is_some() {
            let msg = r
                .msg
                .as_ref()
                .map(|p| String::from_utf8_lossy(&self.expand(p)).into_owned())
                .unwrap_or_default();
            let data = r.logdata.as_ref().map(|p| {
                let mut d = String::from_utf8_lossy(&self.expand(p)).into_owned();
                d.truncate(200);
                d
            });
            self.out.matched.push(Matched {
                id: r.id,
                severity: r.severity,
                paranoia: r.paranoia,
                msg,
                var: String::from_utf8_lossy(&self.matched_var_name).into_owned(),
                data: data.unwrap_or_default(),
            });
        }
        match r.disruptive {
            Disruptive::Deny => {
                self.out.interrupted = Some(r.id);
                self.stop = true;
            }
            Disruptive::Allow => {
                self.out.allowed = Some(r.id);
                self.stop = true;
            }
            Disruptive::Pass => {}
        }
        true
    }

    fn actions(&mut self, r: &Rule) {
        if let Some(p) = &r.msg {
            self.rule_msg = self.expand(p).into_owned();
        }
        for s in &r.setvars {
            match s {
                SetVar::Set(n, v) => {
                    let (n, v) = (tx_key(&self.expand(n)), self.expand(v).into_owned());
                    self.tx.insert(n, v);
                }
                SetVar::Add(n, v) | SetVar::Sub(n, v) => {
                    let n = tx_key(&self.expand(n));
                    let d = ops::num(&self.expand(v));
                    let cur = self.tx.get(&n).map(|x| ops::num(x)).unwrap_or(0);
                    let nv = if matches!(s, SetVar::Add(..)) {
                        cur + d
                    } else {
                        cur - d
                    };
                    self.tx.insert(n, nv.to_string().into_bytes());
                }
                SetVar::Del(n) => {
                    let n = tx_key(&self.expand(n));
                    self.tx.remove(&n);
                }
            }
        }
        for c in &r.ctls {
            match c {
                Ctl::EngineOff => self.stop = true,
                Ctl::RemoveById(r) => self.removed_ids.extend(r.iter().copied()),
                Ctl::RemoveByTag(t) => self.removed_tags.push(t.clone()),
                Ctl::RemoveTargetById(ids, v, s) => {
                    self.removed_targets
                        .push((Some(ids.clone()), None, *v, s.clone()))
                }
                Ctl::RemoveTargetByTag(t, v, s) => {
                    self.removed_targets
                        .push((None, Some(t.clone()), *v, s.clone()))
                }
                Ctl::Ignored => {}
            }
        }
    }

    /// Evaluates one member of a chain (`top` is the chain's starter, whose id and tags the
    /// exclusions name). True if some value matched.
    fn one(&mut self, r: &Rule, top: &Rule) -> bool {
        if r.targets.is_empty() {
            let hit = !matches!(r.op, Op::NoMatch) ^ r.negated;
            if hit {
                self.actions(r);
            }
            return hit;
        }
        let mut refs = Vec::new();
        for t in &r.targets {
            self.collect(t, top, &mut refs);
        }
        let mut any = false;
        for rf in &refs {
            let (var, idx) = match rf {
                Ref::Slot(v, i) => (*v, *i),
                Ref::Copy(..) => (Var::Tx, u32::MAX),
            };
            let cached = if r.transforms.is_empty() {
                None
            } else {
                Some(self.transformed(rf, var, idx, r))
            };
            let hit = {
                let raw = self.value(rf);
                let v: &[u8] = cached.as_deref().unwrap_or(raw);
                self.matches(r, v)
            };
            let Some(caps) = hit else { continue };
            any = true;
            let v = cached
                .as_deref()
                .map(<[u8]>::to_vec)
                .unwrap_or_else(|| self.value(rf).to_vec());
            let name = self.name(rf);
            if let Some(caps) = caps {
                for (k, c) in caps.into_iter().enumerate() {
                    self.tx.insert(k.to_string().into_bytes(), c);
                }
            }
            self.matched_var = v.clone();
            self.matched_var_name = name.clone();
            self.matched_vars.push((name, v));
            // As in ModSecurity, `setvar` and `ctl` run for every matched value, before the
            // chain's next member is evaluated (members may read what the starter set).
            self.actions(r);
        }
        any
    }

    /// The operator's verdict on a value (negation applied); `Some(captures)` on a match.
    #[allow(clippy::option_option)]
    fn matches(&self, r: &Rule, v: &[u8]) -> Option<Option<Vec<Vec<u8>>>> {
        let (hit, caps) = match &r.op {
            Op::Rx(re) => {
                if r.capture && !r.negated {
                    match re.captures(v) {
                        Some(c) => (true, Some(c)),
                        None => (false, None),
                    }
                } else {
                    (re.is_match(v), None)
                }
            }
            Op::Pm(ac) => match ac.find(v) {
                Some(m) if r.capture => (true, Some(vec![v[m.start()..m.end()].to_vec()])),
                Some(_) => (true, None),
                None => (false, None),
            },
            Op::Str(op, p) => (ops::str_op(*op, v, &self.expand(p)), None),
            Op::Num(op, p) => {
                let a = ops::num(v);
                let b = ops::num(&self.expand(p));
                (
                    match op {
                        NumOp::Eq => a == b,
                        NumOp::Ge => a >= b,
                        NumOp::Gt => a > b,
                        NumOp::Le => a <= b,
                        NumOp::Lt => a < b,
                    },
                    None,
                )
            }
            Op::DetectSqli => {
                let d = libinjectionrs::detect_sqli(v);
                let fp = || {
                    vec![d
                        .fingerprint
                        .as_ref()
                        .map(|f| f.as_str().as_bytes().to_vec())
                        .unwrap_or_default()]
                };
                (d.is_injection(), if r.capture { Some(fp()) } else { None })
            }
            Op::DetectXss => (libinjectionrs::detect_xss(v).is_injection(), None),
            Op::ValidateUrlEncoding => (ops::bad_url_encoding(v), None),
            Op::ValidateUtf8 => (std::str::from_utf8(v).is_err(), None),
            Op::ValidateByteRange(ok) => (v.iter().any(|&c| !ok[c as usize]), None),
            Op::IpMatch(l) => (ops::ip_in(l, v), None),
            Op::Unconditional => (true, None),
            Op::NoMatch => (false, None),
        };
        if hit != r.negated {
            Some(if r.negated { None } else { caps })
        } else {
            None
        }
    }

    fn transformed(&mut self, rf: &Ref, var: Var, idx: u32, r: &Rule) -> Rc<[u8]> {
        let cacheable = matches!(rf, Ref::Slot(..));
        let vkey = var as u32;
        let mut start = 0;
        let mut cur: Option<Rc<[u8]>> = None;
        if cacheable {
            for i in (0..r.prefix_ids.len()).rev() {
                if let Some(c) = self.cache.get(&(vkey, idx, r.prefix_ids[i])) {
                    if i + 1 == r.prefix_ids.len() {
                        return c.clone();
                    }
                    cur = Some(c.clone());
                    start = i + 1;
                    break;
                }
            }
        }
        let mut val: Cow<[u8]> = match &cur {
            Some(c) => Cow::Owned(c.to_vec()),
            None => Cow::Owned(self.value(rf).to_vec()),
        };
        for i in start..r.transforms.len() {
            val = match r.transforms[i].apply(&val) {
                Cow::Borrowed(_) => val,
                Cow::Owned(o) => Cow::Owned(o),
            };
            if cacheable {
                self.cache
                    .insert((vkey, idx, r.prefix_ids[i]), Rc::from(&val[..]));
            }
        }
        Rc::from(&val[..])
    }

    fn value<'a>(&'a self, rf: &'a Ref) -> &'a [u8] {
        match rf {
            Ref::Copy(_, v) => v,
            Ref::Slot(var, i) => {
                let i = *i as usize;
                match var {
                    Var::Args | Var::ArgsGet | Var::ArgsPost => &self.args[i].1,
                    Var::ArgsNames | Var::ArgsGetNames | Var::ArgsPostNames => &self.args[i].0,
                    Var::RequestHeaders => &self.headers[i].1,
                    Var::RequestHeadersNames => &self.headers[i].0,
                    Var::RequestCookies => &self.cookies[i].1,
                    Var::RequestCookiesNames => &self.cookies[i].0,
                    Var::Files | Var::MultipartFilename => &self.files[i].1,
                    Var::FilesNames | Var::MultipartName => &self.files[i].0,
                    Var::MultipartPartHeaders => &self.part_headers[i].1,
                    Var::Xml => &self.xml[i].1,
                    &XML_ATTRS => &self.xml_attrs[i].1,
                    v => &self.singles[*v as usize],
                }
            }
        }
    }

    fn name(&self, rf: &Ref) -> Vec<u8> {
        match rf {
            Ref::Copy(k, _) => k.clone(),
            Ref::Slot(var, i) => {
                let i = *i as usize;
                let (prefix, key): (&str, &[u8]) = match var {
                    Var::Args | Var::ArgsGet | Var::ArgsPost => ("ARGS", &self.args[i].0),
                    Var::ArgsNames | Var::ArgsGetNames | Var::ArgsPostNames => {
                        ("ARGS_NAMES", &self.args[i].0)
                    }
                    Var::RequestHeaders => ("REQUEST_HEADERS", &self.headers[i].0),
                    Var::RequestHeadersNames => ("REQUEST_HEADERS_NAMES", &self.headers[i].0),
                    Var::RequestCookies => ("REQUEST_COOKIES", &self.cookies[i].0),
                    Var::RequestCookiesNames => ("REQUEST_COOKIES_NAMES", &self.cookies[i].0),
                    Var::Files => ("FILES", &self.files[i].0),
                    Var::FilesNames => ("FILES_NAMES", &self.files[i].0),
                    Var::MultipartPartHeaders => {
                        ("MULTIPART_PART_HEADERS", &self.part_headers[i].0)
                    }
                    v => return format!("{v:?}").into_bytes(),
                };
                let mut n = prefix.as_bytes().to_vec();
                n.push(b':');
                n.extend_from_slice(key);
                n
            }
        }
    }

    fn excluded(&self, t: &Target, top: &Rule, key: &[u8]) -> bool {
        t.exclusions.iter().any(|s| s.takes(key))
            || self.removed_targets.iter().any(|(ids, tag, v, s)| {
                *v == t.var
                    && (ids
                        .as_ref()
                        .is_some_and(|ids| ids.iter().any(|&(a, b)| top.id >= a && top.id <= b))
                        || tag.as_ref().is_some_and(|tag| top.tags.contains(tag)))
                    && s.takes(key)
            })
    }

    fn collect(&self, t: &Target, top: &Rule, out: &mut Vec<Ref>) {
        let start = out.len();
        let keyed = |pairs: &Pairs, range: std::ops::Range<usize>, var: Var, out: &mut Vec<Ref>| {
            for i in range {
                let k = &pairs[i].0;
                if t.selector.takes(k) && !self.excluded(t, top, k) {
                    out.push(Ref::Slot(var, i as u32));
                }
            }
        };
        match t.var {
            Var::Args | Var::ArgsNames => keyed(&self.args, 0..self.args.len(), t.var, out),
            Var::ArgsGet | Var::ArgsGetNames => keyed(&self.args, 0..self.get_len, t.var, out),
            Var::ArgsPost | Var::ArgsPostNames => {
                keyed(&self.args, self.get_len..self.args.len(), t.var, out)
            }
            Var::RequestHeaders | Var::RequestHeadersNames => {
                keyed(&self.headers, 0..self.headers.len(), t.var, out)
            }
            Var::RequestCookies | Var::RequestCookiesNames => {
                keyed(&self.cookies, 0..self.cookies.len(), t.var, out)
            }
            Var::Files | Var::FilesNames | Var::MultipartFilename | Var::MultipartName => {
                keyed(&self.files, 0..self.files.len(), t.var, out)
            }
            Var::MultipartPartHeaders => {
                keyed(&self.part_headers, 0..self.part_headers.len(), t.var, out)
            }
            Var::Tx => {
                let mut keys: Vec<&Vec<u8>> = self
                    .tx
                    .keys()
                    .filter(|k| t.selector.takes(k) && !self.excluded(t, top, k))
                    .collect();
                keys.sort();
                for k in keys {
                    let mut n = b"TX:".to_vec();
                    n.extend_from_slice(k);
                    out.push(Ref::Copy(n, self.tx[k].clone()));
                }
            }
            Var::MatchedVars | Var::MatchedVarsNames => {
                for (k, v) in &self.matched_vars {
                    let v = if t.var == Var::MatchedVars {
                        v.clone()
                    } else {
                        k.clone()
                    };
                    out.push(Ref::Copy(k.clone(), v));
                }
            }
            Var::MatchedVar => out.push(Ref::Copy(
                self.matched_var_name.clone(),
                self.matched_var.clone(),
            )),
            Var::MatchedVarName => out.push(Ref::Copy(
                self.matched_var_name.clone(),
                self.matched_var_name.clone(),
            )),
            Var::Xml => {
                let attrs = matches!(&t.selector, Selector::Key(k) if k.contains(&b'@'));
                let n = if attrs {
                    self.xml_attrs.len()
                } else {
                    self.xml.len()
                };
                let v = if attrs { XML_ATTRS } else { Var::Xml };
                out.extend((0..n as u32).map(|i| Ref::Slot(v, i)));
            }
            Var::Unsupported => {}
            v => out.push(Ref::Slot(v, 0)),
        }
        if t.count {
            let n = out.len() - start;
            out.truncate(start);
            let mut name = format!("{:?}", t.var).into_bytes();
            if let Selector::Key(k) = &t.selector {
                name.push(b':');
                name.extend_from_slice(k);
            }
            out.push(Ref::Copy(name, n.to_string().into_bytes()));
        }
    }

    /// Expands `%{…}` macros.
    fn expand<'p>(&self, p: &'p Param) -> Cow<'p, [u8]> {
        if let [Part::Lit(l)] = p.parts.as_slice() {
            return Cow::Borrowed(l);
        }
        let mut o = Vec::new();
        for part in &p.parts {
            match part {
                Part::Lit(l) => o.extend_from_slice(l),
                Part::Macro(c, k) => self.macro_value(c, k.as_deref(), &mut o),
            }
        }
        Cow::Owned(o)
    }

    fn macro_value(&self, c: &str, k: Option<&str>, o: &mut Vec<u8>) {
        let find = |pairs: &Pairs, k: &str| {
            pairs
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k.as_bytes()))
                .map(|(_, v)| v.clone())
        };
        let v = match (c, k) {
            ("tx", Some(k)) => self.tx.get(k.as_bytes()).cloned(),
            ("matched_var", None) => Some(self.matched_var.clone()),
            ("matched_var_name", None) => Some(self.matched_var_name.clone()),
            ("rule", Some("id")) => Some(self.rule_id.to_string().into_bytes()),
            ("rule", Some("msg")) => Some(self.rule_msg.clone()),
            ("request_headers", Some(k)) => find(&self.headers, k),
            ("args", Some(k)) => find(&self.args, k),
            ("request_cookies", Some(k)) => find(&self.cookies, k),
            (name, None) => Var::by_name(name)
                .filter(|v| v.is_single())
                .map(|v| self.singles[v as usize].clone()),
            _ => None,
        };
        if let Some(v) = v {
            o.extend_from_slice(&v);
        }
    }
}

fn percent_decode(v: &[u8]) -> Vec<u8> {
    if !v.contains(&b'%') {
        return v.to_vec();
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            if let (Some(a), Some(b)) = (
                v.get(i + 1).and_then(|&c| crate::transform::hex(c)),
                v.get(i + 2).and_then(|&c| crate::transform::hex(c)),
            ) {
                o.push(a << 4 | b);
                i += 3;
                continue;
            }
        }
        o.push(v[i]);
        i += 1;
    }
    o
}

fn tx_key(n: &[u8]) -> Vec<u8> {
    let n = lower(n);
    match n.strip_prefix(b"tx.") {
        Some(k) => k.to_vec(),
        None => n,
    }
}

/// The index after the marker (or rule id) `target` at or after `from`; the end if there is none.
fn skip_after(items: &[Item], from: usize, target: &str) -> usize {
    let id: Option<u32> = target.parse().ok();
    for (j, it) in items.iter().enumerate().skip(from) {
        match it {
            Item::Marker(m) if m == target => return j + 1,
            Item::Rule(r) if id == Some(r.id) => return j + 1,
            _ => {}
        }
    }
    items.len()
}
