//! The live rule set: one snapshot behind `arc-swap`, swapped whole.

use super::compile::{RuleSet, RuleSettings};
use arc_swap::ArcSwap;
use std::sync::Arc;

/// The live rule set: one immutable snapshot, swapped whole.
pub struct LiveRules {
    pub(super) current: ArcSwap<RuleSet>,
}

impl LiveRules {
    pub fn new(set: RuleSet) -> Self {
        LiveRules {
            current: ArcSwap::from_pointee(set),
        }
    }

    pub fn empty() -> Self {
        Self::new(RuleSet::empty(RuleSettings::default()))
    }

    /// Starts from a set that is already shared.
    pub fn from_arc(set: Arc<RuleSet>) -> Self {
        LiveRules {
            current: ArcSwap::new(set),
        }
    }

    /// The snapshot a decision uses from its first tier to its last.
    pub fn snapshot(&self) -> Arc<RuleSet> {
        self.current.load_full()
    }

    /// Publishes a new set; returns the previous one.
    pub fn swap(&self, set: RuleSet) -> Arc<RuleSet> {
        self.current.swap(Arc::new(set))
    }

    /// Publishes a set that is already shared (e.g. a cached compiled version).
    pub fn swap_arc(&self, set: Arc<RuleSet>) -> Arc<RuleSet> {
        self.current.swap(set)
    }
}

impl std::fmt::Debug for LiveRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRules")
            .field("version", &self.snapshot().version())
            .finish()
    }
}
