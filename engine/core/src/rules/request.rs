//! The request as rules see it: `req`, a typed object of cheap string handles built once per
//! decision, and the context a tier is evaluated in.

use crate::model::DecideRequest;
use crate::policy::AppPolicy;
use rhai::Dynamic;
use std::sync::Arc;

/// What the request looks like to a rule tier.
#[derive(Debug, Clone, Copy)]
pub struct DecisionContext<'a> {
    pub request: &'a DecideRequest,
    pub app: &'a AppPolicy,
    pub now_ms: i64,
}

/// The request as rules see it, built once per decision. Rhai clones the object when a rule reads
/// a property or passes `req` to a helper, so it is one shared pointer: a clone is one atomic
/// increment.
#[derive(Debug, Clone, Default)]
pub struct Req(Arc<ReqData>);

impl std::ops::Deref for Req {
    type Target = ReqData;
    fn deref(&self) -> &ReqData {
        &self.0
    }
}

/// What [`Req`] holds: the judged request itself (its strings are read in place, never copied),
/// the few values derived from it, and the decision's time.
#[derive(Debug, Default)]
pub struct ReqData {
    pub(super) src: DecideRequest,
    /// `request.method` in upper case, when it is not already.
    pub(super) method_upper: Option<Box<str>>,
    /// Server time of the decision (not a getter: helpers read it).
    pub now_ms: i64,
    /// The WAF scan of this request, done once however many rules ask.
    pub(super) waf_hit: std::sync::OnceLock<Option<(crate::waf::Attack, &'static str)>>,
    /// The CRS's verdict on this request, judged once however many rules ask.
    pub(super) crs_hit: std::sync::OnceLock<crate::waf::crs::CrsVerdict>,
    /// `req.cleared`: the request carries a verified solution or clearance (set before the
    /// tiers run).
    pub(super) cleared: std::sync::atomic::AtomicBool,
}

impl Req {
    pub fn from_context(ctx: &DecisionContext<'_>) -> Req {
        Self::from_request(ctx.request, ctx.now_ms)
    }

    /// The rule-visible view of `r` at server time `now_ms` (a copy of `r`).
    pub fn from_request(r: &DecideRequest, now_ms: i64) -> Req {
        Self::from_owned(r.clone(), now_ms)
    }

    /// The rule-visible view of `r` at server time `now_ms`, taking `r` (see
    /// [`Req::into_request`]).
    pub fn from_owned(r: DecideRequest, now_ms: i64) -> Req {
        let m = &r.request.method;
        let method_upper = m
            .bytes()
            .any(|b| b.is_ascii_lowercase())
            .then(|| m.to_ascii_uppercase().into_boxed_str());
        Req(Arc::new(ReqData {
            src: r,
            method_upper,
            now_ms,
            waf_hit: std::sync::OnceLock::new(),
            crs_hit: std::sync::OnceLock::new(),
            cleared: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Marks the request cleared (a verified proof of work or clearance) for the rules.
    pub fn set_cleared(&self, cleared: bool) {
        self.0
            .cleared
            .store(cleared, std::sync::atomic::Ordering::Relaxed);
    }

    /// The judged request back: taken when this is the last handle (rules keep none once a
    /// decision is made), else copied.
    pub fn into_request(self) -> DecideRequest {
        match Arc::try_unwrap(self.0) {
            Ok(data) => data.src,
            Err(shared) => shared.src.clone(),
        }
    }
}

/// `""` for an absent value.
pub(super) fn or_empty(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

impl ReqData {
    /// `req.cleared`.
    pub fn cleared(&self) -> bool {
        self.cleared.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The judged request.
    pub fn request(&self) -> &DecideRequest {
        &self.src
    }

    pub fn app(&self) -> &str {
        &self.src.app
    }

    pub fn path(&self) -> &str {
        &self.src.request.path
    }

    /// `request.method`, upper-cased.
    pub fn method(&self) -> &str {
        self.method_upper
            .as_deref()
            .unwrap_or(&self.src.request.method)
    }

    pub fn user(&self) -> &str {
        or_empty(&self.src.user_id)
    }

    pub fn ip(&self) -> &str {
        or_empty(&self.src.client.ip)
    }

    pub fn device_id(&self) -> &str {
        or_empty(&self.src.client.device_id)
    }

    pub fn ja3(&self) -> &str {
        or_empty(&self.src.client.ja3)
    }

    /// The caller's `client.user_agent`, else the judged request's own header.
    pub fn user_agent(&self) -> &str {
        self.src
            .client
            .user_agent
            .as_deref()
            .or_else(|| self.src.request.header("user-agent"))
            .unwrap_or("")
    }

    /// The first attack the WAF detectors find in the request, and where (cached).
    pub fn waf(&self) -> Option<(crate::waf::Attack, &'static str)> {
        *self.waf_hit.get_or_init(|| {
            let r = &self.src.request;
            crate::waf::scan_request(
                // The path as sent: the evidence of an attack is in its spelling.
                r.signed_path(),
                &r.query,
                r.body.as_deref().unwrap_or(""),
                self.src.params.as_ref(),
                r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )
        })
    }

    /// The CRS's verdict on the request (cached); nothing found without a CRS.
    pub fn crs(&self, crs: Option<&crate::waf::crs::Crs>) -> &crate::waf::crs::CrsVerdict {
        self.crs_hit
            .get_or_init(|| crs.map(|c| c.judge(&self.src)).unwrap_or_default())
    }

    /// `crs(req)`: the attack family of the first CRS rule that matched, when the request
    /// reached the anomaly threshold; else "".
    pub(super) fn crs_name(&self, crs: Option<&crate::waf::crs::Crs>) -> &'static str {
        let v = self.crs(crs);
        if v.blocked {
            v.attack()
        } else {
            ""
        }
    }

    /// `waf(req)`: the attack's name, or "".
    pub(super) fn waf_name(&self) -> &'static str {
        self.waf().map(|(a, _)| a.as_str()).unwrap_or("")
    }

    /// `waf_part(req)`: where the attack is, or "".
    pub(super) fn waf_part(&self) -> &'static str {
        self.waf().map(|(_, part)| part).unwrap_or("")
    }

    /// `header(name)`, case-insensitive: "" when absent.
    pub(super) fn header(&self, name: &str) -> &str {
        self.src.request.header(name).unwrap_or("")
    }

    pub(super) fn param(&self, name: &str) -> Dynamic {
        match self.src.params.as_ref().and_then(|p| p.get(name)) {
            None | Some(serde_json::Value::Null) => Dynamic::UNIT,
            Some(serde_json::Value::String(s)) => s.clone().into(),
            Some(serde_json::Value::Bool(b)) => (*b).into(),
            Some(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => i.into(),
                None => n.as_f64().unwrap_or(0.0).into(),
            },
            Some(other) => other.to_string().into(),
        }
    }
}

/// `waf_value(v)`: the attack found in `v` alone, or "".
pub(super) fn waf_value(v: &str) -> &'static str {
    crate::waf::scan_value(v).map(|a| a.as_str()).unwrap_or("")
}
