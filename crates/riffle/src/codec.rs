//! The state codec: how state values, keys' namespaces and operator state are written to bytes
//! (postcard: compact and fast; not self-describing, so a changed type needs a migration).
//! Used by the state backends, the operators that snapshot state of their own and the
//! checkpoints; below all of them. (Also at its old place, `riffle::checkpoint::{encode,
//! decode, encode_into}`.)

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Encodes a value with the state codec (postcard: compact, self-describing enough for serde).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(|e| Error::user(format!("cannot encode state: {e}")))
}

/// Appends the encoding of `value` (as [`encode`] writes it) to `buffer`.
pub fn encode_into<T: Serialize + ?Sized>(value: &T, buffer: &mut Vec<u8>) -> Result<()> {
    *buffer = postcard::to_extend(value, std::mem::take(buffer))
        .map_err(|e| Error::user(format!("cannot encode state: {e}")))?;
    Ok(())
}

/// Decodes a value written by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::user(format!("cannot decode state: {e}")))
}
