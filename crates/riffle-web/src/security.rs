//! The defences of the control plane: constant-time token comparison, the `Host` and `Origin`
//! checks that keep other web sites (and DNS rebinding) away from the control endpoints, and the
//! identity proof with which a registered job shows the CLI that it is the job of its registry
//! entry before the CLI sends it a token.
//!
//! See "Security of the control plane" in `docs/operations.md` for the whole model.

use std::net::{IpAddr, SocketAddr};

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The header every control request carries (any value): a browser cannot send it cross-site
/// without a CORS preflight, which the server never grants.
pub const REQUEST_HEADER: &str = "x-riffle-request";

#[cfg(test)]
thread_local! {
    /// How many times [`tokens_equal`] ran on this thread (tests check it is what is used).
    pub(crate) static COMPARISONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether `given` equals `expected`, in time that depends on neither their contents nor their
/// lengths: both are hashed (SHA-256) and the digests compared in constant time (`subtle`).
///
/// ```
/// use riffle_web::security::tokens_equal;
/// assert!(tokens_equal(b"s3cret", b"s3cret"));
/// assert!(!tokens_equal(b"s3creT", b"s3cret"));
/// assert!(!tokens_equal(b"s3", b"s3cret"));
/// ```
pub fn tokens_equal(given: &[u8], expected: &[u8]) -> bool {
    #[cfg(test)]
    COMPARISONS.with(|c| c.set(c.get() + 1));
    let given = Sha256::digest(given);
    let expected = Sha256::digest(expected);
    given.as_slice().ct_eq(expected.as_slice()).into()
}

/// The authorities (`host[:port]`) under which a browser may legitimately reach this server: the
/// bound address, loopback names and addresses when it listens on loopback, any IP address when
/// it listens on all of them (`0.0.0.0`, `::`), always with the bound port, plus configured names.
#[derive(Clone, Debug)]
pub(crate) struct AllowedHosts {
    bound: SocketAddr,
    /// Lower-case `host` (with the bound port) or `host:port`.
    extra: Vec<String>,
}

/// `host[:port]` split, the host lower-cased without a trailing dot and IPv6 brackets.
fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let authority = authority.trim();
    if authority.is_empty() || authority.contains(['/', '@', ' ', '\\']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            port => (host, Some(port.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            Some(_) => return None,
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => default_port,
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

impl AllowedHosts {
    pub(crate) fn new(bound: SocketAddr, extra: &[String]) -> Self {
        AllowedHosts {
            bound,
            extra: extra
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a `Host` header (or an origin's authority) names this server.
    pub(crate) fn allows(&self, authority: &str, default_port: u16) -> bool {
        let Some((host, port)) = split_authority(authority, default_port) else {
            return false;
        };
        if self.extra.iter().any(|allowed| {
            *allowed == format!("{host}:{port}") || (*allowed == host && port == self.bound.port())
        }) {
            return true;
        }
        if port != self.bound.port() {
            return false;
        }
        let ip = self.bound.ip();
        match host.parse::<IpAddr>() {
            Ok(given) if given.is_unspecified() => false,
            Ok(given) => {
                given == ip || (ip.is_loopback() && given.is_loopback()) || ip.is_unspecified()
            }
            Err(_) => host == "localhost" && (ip.is_loopback() || ip.is_unspecified()),
        }
    }

    /// Whether an `Origin` header names this server (`http://` or `https://`; `null` never).
    pub(crate) fn allows_origin(&self, origin: &str) -> bool {
        let (authority, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
            (rest, 80)
        } else if let Some(rest) = origin.strip_prefix("https://") {
            (rest, 443)
        } else {
            return false;
        };
        self.allows(authority, default_port)
    }
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes from hex (either case); `None` for anything else.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `n` random bytes from the operating system, as hex.
pub(crate) fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random numbers");
    hex(&bytes)
}

/// The proof that a server knows `key` (the secret of its registry entry): HMAC-SHA256 over the
/// job id, the address it listens on and the client's fresh challenge, as hex.
pub(crate) fn identity_proof(key: &[u8], id: &str, address: &str, challenge: &str) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    for part in ["riffle-identity-v1", id, address, challenge] {
        mac.update(part.as_bytes());
        mac.update(&[0]);
    }
    hex(&mac.finalize().into_bytes())
}

/// Whether `proof` is the proof of `key` for this id, address and challenge (constant time).
pub(crate) fn proof_valid(
    key: &[u8],
    id: &str,
    address: &str,
    challenge: &str,
    proof: &str,
) -> bool {
    let expected = identity_proof(key, id, address, challenge);
    tokens_equal(proof.as_bytes(), expected.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_identical_whatever_their_lengths() {
        assert!(tokens_equal(b"s3cret", b"s3cret"));
        assert!(tokens_equal(b"", b""));
        assert!(!tokens_equal(b"s3creT", b"s3cret"), "same length");
        assert!(!tokens_equal(b"s3cre", b"s3cret"), "a prefix");
        assert!(!tokens_equal(b"s3cret!", b"s3cret"), "longer");
        assert!(!tokens_equal(b"", b"s3cret"));
    }

    fn hosts(bound: &str) -> AllowedHosts {
        AllowedHosts::new(bound.parse().unwrap(), &["riffle.internal".into()])
    }

    #[test]
    fn host_and_origin_must_name_the_server_itself() {
        let loopback = hosts("127.0.0.1:8081");
        for ok in [
            "127.0.0.1:8081",
            "localhost:8081",
            "LOCALHOST:8081",
            "127.0.0.2:8081",
            "[::1]:8081",
            "riffle.internal:8081",
        ] {
            assert!(loopback.allows(ok, 80), "{ok}");
        }
        for refused in [
            "evil.example:8081",
            "evil.example",
            "127.0.0.1:8082",
            "127.0.0.1",
            "10.0.0.5:8081",
            "localhost.evil.example:8081",
            "user@127.0.0.1:8081",
            "127.0.0.1:8081/x",
            "",
            "[::1",
            "::1:8081",
        ] {
            assert!(!loopback.allows(refused, 80), "{refused}");
        }
        assert!(loopback.allows_origin("http://127.0.0.1:8081"));
        assert!(loopback.allows_origin("http://localhost:8081"));
        assert!(!loopback.allows_origin("http://evil.example"));
        assert!(!loopback.allows_origin("http://evil.example:8081"));
        assert!(!loopback.allows_origin("null"));
        assert!(!loopback.allows_origin("http://127.0.0.1"), "port 80");

        let any = hosts("0.0.0.0:9000");
        assert!(any.allows("10.0.0.5:9000", 80));
        assert!(any.allows("localhost:9000", 80));
        assert!(
            !any.allows("evil.example:9000", 80),
            "a name needs configuring"
        );
        assert!(!any.allows("0.0.0.0:9000", 80));
        let one = hosts("10.0.0.5:80");
        assert!(one.allows("10.0.0.5", 80), "default port");
        assert!(one.allows("riffle.internal", 80));
        assert!(!one.allows("127.0.0.1", 80), "not listening there");
        let explicit = AllowedHosts::new("127.0.0.1:8081".parse().unwrap(), &["proxy:443".into()]);
        assert!(explicit.allows_origin("https://proxy"));
        assert!(!explicit.allows_origin("https://proxy:8443"));
    }

    #[test]
    fn hex_round_trips_and_refuses_other_text() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(unhex("000fFF"), Some(vec![0, 15, 255]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("+1"), None);
        assert_eq!(random_hex(16).len(), 32);
        assert_ne!(random_hex(16), random_hex(16));
    }

    #[test]
    fn an_identity_proof_holds_only_for_its_key_id_address_and_challenge() {
        let proof = identity_proof(b"key", "abcd1234", "127.0.0.1:8081", "c0ffee");
        assert_eq!(proof.len(), 64);
        assert!(proof_valid(
            b"key",
            "abcd1234",
            "127.0.0.1:8081",
            "c0ffee",
            &proof
        ));
        assert!(!proof_valid(
            b"kez",
            "abcd1234",
            "127.0.0.1:8081",
            "c0ffee",
            &proof
        ));
        assert!(!proof_valid(
            b"key",
            "abcd1235",
            "127.0.0.1:8081",
            "c0ffee",
            &proof
        ));
        assert!(!proof_valid(
            b"key",
            "abcd1234",
            "127.0.0.1:8082",
            "c0ffee",
            &proof
        ));
        assert!(!proof_valid(
            b"key",
            "abcd1234",
            "127.0.0.1:8081",
            "c0ffef",
            &proof
        ));
        assert!(!proof_valid(
            b"key",
            "abcd1234",
            "127.0.0.1:8081",
            "c0ffee",
            ""
        ));
    }
}
