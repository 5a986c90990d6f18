//! The anti-replay core: the canonical string and its HMAC signature ([`canonical`], [`sign`]), an
//! app's signing keys and the check of several signatures against them ([`keys`]),
//! nonce de-duplication ([`nonce`], over the time-sliced Bloom filter of [`bloom`] or an exact
//! set) and duplicate-submission fingerprints ([`fingerprint`]). The timestamp window itself is a
//! comparison in [`crate::engine`].

pub mod bloom;
pub mod canonical;
pub mod fingerprint;
pub mod keys;
pub mod nonce;
pub mod sign;
