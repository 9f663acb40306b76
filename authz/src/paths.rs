//! `--authorization-always-allow-paths`.

/// Kubernetes' default `--authorization-always-allow-paths`.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

/// Paths anybody may reach, anonymous included, without a SubjectAccessReview.
///
/// An entry matches its exact path; an entry ending in `*` matches every path starting with
/// the rest (`/readyz/*`), as in Kubernetes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlwaysAllowPaths {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl AlwaysAllowPaths {
    /// Builds the matcher from flag values.
    pub fn new(paths: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for path in paths.into_iter().map(Into::into) {
            match path.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_owned()),
                None => exact.push(path),
            }
        }
        Self { exact, prefixes }
    }

    /// Nothing is always allowed.
    pub fn none() -> Self {
        Self::new(Vec::<String>::new())
    }

    /// Whether `path` is always allowed.
    pub fn matches(&self, path: &str) -> bool {
        self.exact.iter().any(|p| p == path) || self.prefixes.iter().any(|p| path.starts_with(p.as_str()))
    }
}

impl Default for AlwaysAllowPaths {
    fn default() -> Self {
        Self::new(DEFAULT_ALWAYS_ALLOW_PATHS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_prefix_matches() {
        let paths = AlwaysAllowPaths::new(["/healthz", "/readyz/*"]);
        assert!(paths.matches("/healthz"));
        assert!(!paths.matches("/healthz/etcd"));
        assert!(paths.matches("/readyz/ping"));
        assert!(!paths.matches("/readyz"));
        assert!(!paths.matches("/apis"));
        assert!(AlwaysAllowPaths::default().matches("/livez"));
        assert!(!AlwaysAllowPaths::none().matches("/livez"));
    }
}
