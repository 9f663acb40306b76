//! Continue tokens: where a paged list resumes, and at which revision.
//!
//! A token is base64url JSON `{"v":1,"rv":<revision>,"start":"<key suffix>"}`. The key is stored
//! relative to the list prefix, so a token can never point a list outside the prefix it was
//! issued for, whatever a client does to it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, Revision};

#[derive(Serialize, Deserialize)]
struct Token {
    v: u32,
    rv: Revision,
    start: String,
}

/// A decoded token: list from `start` (inclusive, absolute key) at `revision`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Continue {
    pub(crate) revision: Revision,
    pub(crate) start: String,
}

/// The token that resumes after `last_key`, a key under `prefix`.
pub(crate) fn encode(prefix: &str, last_key: &str, revision: Revision) -> String {
    let rel = last_key.strip_prefix(prefix).unwrap_or(last_key);
    // The next key in byte order after `last_key` is `last_key` + NUL.
    let token = Token {
        v: 1,
        rv: revision,
        start: format!("{rel}\0"),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("a token always serializes"))
}

/// Decode a token issued for `prefix`.
pub(crate) fn decode(prefix: &str, token: &str) -> Result<Continue> {
    let invalid = |reason: &str| Error::InvalidContinue {
        reason: reason.to_string(),
    };
    let raw = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| invalid("not base64url"))?;
    let t: Token = serde_json::from_slice(&raw).map_err(|_| invalid("not a continue token"))?;
    if t.v != 1 {
        return Err(invalid("unknown token version"));
    }
    if t.rv == 0 {
        return Err(invalid("token without a revision"));
    }
    if t.start.is_empty() {
        return Err(invalid("token without a start key"));
    }
    Ok(Continue {
        revision: t.rv,
        start: format!("{prefix}{}", t.start),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_resumes_after_the_last_key() {
        let t = encode("/r/g/vpcs/", "/r/g/vpcs/ns/a", 42);
        let c = decode("/r/g/vpcs/", &t).unwrap();
        assert_eq!(
            c,
            Continue {
                revision: 42,
                start: "/r/g/vpcs/ns/a\0".into()
            }
        );
    }

    #[test]
    fn a_token_cannot_leave_its_prefix() {
        let t = encode("/r/g/vpcs/", "/r/g/vpcs/ns/a", 42);
        let c = decode("/r/g/ports/", &t).unwrap();
        assert!(c.start.starts_with("/r/g/ports/"));
    }

    #[test]
    fn tampered_tokens_are_refused() {
        for bad in ["", "!!!", "eyJ2IjoyLCJydiI6MSwic3RhcnQiOiJhIn0", "bm90IGpzb24"] {
            assert!(
                matches!(decode("/p/", bad), Err(Error::InvalidContinue { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(s in ".*") {
            let _ = decode("/p/", &s);
        }

        #[test]
        fn any_key_round_trips(rel in "[a-z0-9./-]{1,40}", rv in 1u64..u64::MAX) {
            let t = encode("/p/", &format!("/p/{rel}"), rv);
            let c = decode("/p/", &t).unwrap();
            prop_assert_eq!(c.revision, rv);
            prop_assert_eq!(c.start, format!("/p/{rel}\0"));
        }
    }
}
