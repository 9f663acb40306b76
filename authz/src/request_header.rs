//! Front-proxy authentication: `X-Remote-*` headers vouched for by a client certificate.
//!
//! The kube-aggregator proxies a request with the original user in `X-Remote-User`,
//! `X-Remote-Uid`, `X-Remote-Group` and `X-Remote-Extra-*`, over a TLS connection authenticated
//! with its front-proxy client certificate. The headers are believed only when that certificate
//! chains to the request-header CA and its CN is allowed.

use std::collections::BTreeMap;

use http::HeaderMap;
use percent_encoding::percent_decode_str;
use rustls_pki_types::UnixTime;

use crate::{
    user::UserInfo,
    x509::{CaBundle, CertError, PeerCertificates},
};

/// Default username header (`--requestheader-username-headers`).
pub const DEFAULT_USERNAME_HEADER: &str = "x-remote-user";
/// Default group header (`--requestheader-group-headers`).
pub const DEFAULT_GROUP_HEADER: &str = "x-remote-group";
/// Default extra-header prefix (`--requestheader-extra-headers-prefix`).
pub const DEFAULT_EXTRA_HEADERS_PREFIX: &str = "x-remote-extra-";
/// The UID header the aggregator sends.
pub const REMOTE_UID_HEADER: &str = "x-remote-uid";
/// Every header starting with this is removed before handlers run, whatever the configuration.
const REMOTE_HEADER_FAMILY: &str = "x-remote-";

/// How to recognise and read front-proxy requests.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestHeaderConfig {
    /// The CA the front proxy's client certificate must chain to.
    pub client_ca: CaBundle,
    /// Allowed front-proxy certificate CNs; empty allows any CN signed by `client_ca`.
    pub allowed_names: Vec<String>,
    /// Headers holding the user name; the first non-empty one wins.
    pub username_headers: Vec<String>,
    /// Headers holding the user's UID; the first non-empty one wins.
    pub uid_headers: Vec<String>,
    /// Headers holding groups; every value of every header is a group.
    pub group_headers: Vec<String>,
    /// Prefixes of headers holding extras; the rest of the header name is the key.
    pub extra_headers_prefixes: Vec<String>,
}

impl RequestHeaderConfig {
    /// A configuration with Kubernetes' default header names (no UID headers).
    pub fn with_defaults(client_ca: CaBundle) -> Self {
        Self {
            client_ca,
            allowed_names: Vec::new(),
            username_headers: vec![DEFAULT_USERNAME_HEADER.to_owned()],
            uid_headers: Vec::new(),
            group_headers: vec![DEFAULT_GROUP_HEADER.to_owned()],
            extra_headers_prefixes: vec![DEFAULT_EXTRA_HEADERS_PREFIX.to_owned()],
        }
    }

    /// Authenticates a front-proxy request.
    ///
    /// `Ok(None)` when the request does not claim to be one (no username header, or no client
    /// certificate at all); an error when it claims to be one but the certificate does not vouch
    /// for it.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerCertificates>,
        now: UnixTime,
    ) -> Result<Option<UserInfo>, CertError> {
        let Some(name) = first_value(headers, &self.username_headers) else {
            return Ok(None);
        };
        let Some(peer) = peer.filter(|p| !p.chain().is_empty()) else {
            return Ok(None);
        };
        // The chain is verified once per connection; the allowed names are checked per
        // request, against the configuration in force now.
        let identity = self.client_ca.verify_peer(peer, now)?;
        if !self.allowed_names.is_empty() && !self.allowed_names.contains(&identity.common_name) {
            return Err(CertError::NameNotAllowed(identity.common_name));
        }
        Ok(Some(UserInfo {
            name,
            uid: first_value(headers, &self.uid_headers).unwrap_or_default(),
            groups: all_values(headers, &self.group_headers),
            extra: self.extras(headers),
        }))
    }

    fn extras(&self, headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for prefix in &self.extra_headers_prefixes {
            let prefix = prefix.to_ascii_lowercase();
            for (name, value) in headers {
                // `http` stores header names lower-cased.
                let Some(raw_key) = name.as_str().strip_prefix(&prefix) else {
                    continue;
                };
                let Ok(value) = value.to_str() else { continue };
                if raw_key.is_empty() || value.is_empty() {
                    continue;
                }
                let key = percent_decode_str(raw_key)
                    .decode_utf8()
                    .map_or_else(|_| raw_key.to_owned(), std::borrow::Cow::into_owned);
                extra.entry(key).or_default().push(value.to_owned());
            }
        }
        extra
    }

    /// Removes every header this configuration reads, plus the whole `X-Remote-*` family.
    pub fn strip_headers(&self, headers: &mut HeaderMap) {
        for name in self
            .username_headers
            .iter()
            .chain(&self.uid_headers)
            .chain(&self.group_headers)
        {
            headers.remove(name.to_ascii_lowercase().as_str());
        }
        let prefixes: Vec<String> = self
            .extra_headers_prefixes
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect();
        strip_prefixed(headers, |name| {
            prefixes.iter().any(|p| name.starts_with(p.as_str()))
        });
    }
}

/// Removes the `X-Remote-*` family from any request.
pub(crate) fn strip_remote_headers(headers: &mut HeaderMap) {
    strip_prefixed(headers, |name| name.starts_with(REMOTE_HEADER_FAMILY));
}

fn strip_prefixed(headers: &mut HeaderMap, matches: impl Fn(&str) -> bool) {
    let doomed: Vec<http::HeaderName> = headers.keys().filter(|n| matches(n.as_str())).cloned().collect();
    for name in doomed {
        headers.remove(&name);
    }
}

fn first_value(headers: &HeaderMap, names: &[String]) -> Option<String> {
    names.iter().find_map(|name| {
        headers
            .get_all(name.to_ascii_lowercase().as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| !v.is_empty())
            .map(str::to_owned)
    })
}

fn all_values(headers: &HeaderMap, names: &[String]) -> Vec<String> {
    names
        .iter()
        .flat_map(|name| headers.get_all(name.to_ascii_lowercase().as_str()).iter())
        .filter_map(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}
