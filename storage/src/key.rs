/// The storage key of one object: `/<prefix>/<group>/<resource>/<namespace>/<name>`.
///
/// Cluster-scoped kinds have no namespace segment; the core group (empty name) has no group
/// segment, as Kubernetes stores `/registry/namespaces/<name>`. Every part is used verbatim; the API server
/// validates names and namespaces before they get here, so no part contains `/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectKey<'a> {
    /// The store-wide root, e.g. `registry` (no slashes).
    pub prefix: &'a str,
    /// The API group, e.g. `sdn.cozystack.io`.
    pub group: &'a str,
    /// The plural resource, e.g. `vpcs`.
    pub resource: &'a str,
    /// The namespace of a namespaced kind.
    pub namespace: Option<&'a str>,
}

impl<'a> ObjectKey<'a> {
    /// The key of the object `name`.
    pub fn object(&self, name: &str) -> String {
        let mut k = self.list_prefix();
        k.push_str(name);
        k
    }

    /// The prefix that lists every object of the resource in the namespace, or in every
    /// namespace when `namespace` is `None`. Ends in `/`.
    pub fn list_prefix(&self) -> String {
        let mut k = if self.group.is_empty() {
            format!("/{}/{}/", self.prefix, self.resource)
        } else {
            format!("/{}/{}/{}/", self.prefix, self.group, self.resource)
        };
        if let Some(ns) = self.namespace {
            k.push_str(ns);
            k.push('/');
        }
        k
    }
}

/// The smallest key greater than every key that starts with `prefix` (etcd's range end).
///
/// Returns an empty vector when no such key exists (a prefix of only `0xff` bytes), which etcd
/// reads as "to the end of the keyspace".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_and_cluster_keys() {
        let ns = ObjectKey {
            prefix: "registry",
            group: "sdn.cozystack.io",
            resource: "vpcs",
            namespace: Some("t1"),
        };
        assert_eq!(ns.object("a"), "/registry/sdn.cozystack.io/vpcs/t1/a");
        assert_eq!(ns.list_prefix(), "/registry/sdn.cozystack.io/vpcs/t1/");
        let all = ObjectKey {
            namespace: None,
            ..ns
        };
        assert_eq!(all.list_prefix(), "/registry/sdn.cozystack.io/vpcs/");
    }

    #[test]
    fn prefix_end_increments_last_byte_and_carries() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), Vec::<u8>::new());
    }
}
