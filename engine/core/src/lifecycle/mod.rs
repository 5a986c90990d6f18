//! What happens to a rule set off the request path: regression against recorded samples
//! ([`regress`]), backtests over recorded decisions ([`backtest`]) and signed bundles
//! ([`bundle`]). Each depends on the engine; nothing on the request path depends on them.

pub mod backtest;
pub mod bundle;
pub mod regress;
