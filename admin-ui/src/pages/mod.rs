pub mod decisions;
pub mod lists;
pub mod login;
pub mod overview;
pub mod rollouts;
pub mod rules;
pub mod sandbox;
pub mod settings;
