//! The one error every state store returns, whichever backend it runs on.

/// A store failure, answered by the declared `on_store_error` policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store full: {0}")]
    Full(String),
    /// The call itself was wrong (a rule passed a bad argument): not a store failure, so the
    /// store policy does not apply; the rule fails like any other rule error.
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    /// Whether the declared store policy (`on_store_error`) answers this error.
    pub fn is_store_failure(&self) -> bool {
        !matches!(self, StoreError::Invalid(_))
    }
}
