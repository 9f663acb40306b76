//! The authenticated identity of a request.

use std::collections::BTreeMap;

/// The user name Kubernetes gives requests that carry no credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of every request that carries no credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group added to every authenticated user.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// Members of this group are allowed everything without a SubjectAccessReview.
pub const MASTERS_GROUP: &str = "system:masters";

/// Who made a request, as established by [`Authentication`](crate::Authentication).
///
/// The authentication layer inserts it as a request extension; later layers and handlers read it
/// with `req.extensions().get::<UserInfo>()`. It mirrors Kubernetes' `user.Info`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// The user name, e.g. `alice` or `system:serviceaccount:ns:sa`.
    pub name: String,
    /// A unique identifier of the user, empty when the authenticator did not supply one.
    pub uid: String,
    /// Groups the user belongs to, in the order the authenticator reported them.
    pub groups: Vec<String>,
    /// Additional attributes (scopes, credential ids …). Keys are lower-case.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups, no UID, no extras.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            name: name.into(),
            uid: String::new(),
            groups: groups.into_iter().map(Into::into).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// The identity of a request without credentials.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS_USER, [UNAUTHENTICATED_GROUP])
    }

    /// Whether this is the anonymous user.
    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS_USER
    }

    /// Whether the user is a member of `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Adds `system:authenticated` unless the user is anonymous or already has it, as Kubernetes'
    /// authenticated-group adder does.
    pub(crate) fn with_authenticated_group(mut self) -> Self {
        let anonymous = self.is_anonymous() || self.in_group(UNAUTHENTICATED_GROUP);
        if !anonymous && !self.in_group(AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_owned());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once() {
        let user = UserInfo::new("alice", ["g1"]).with_authenticated_group();
        assert_eq!(user.groups, ["g1", AUTHENTICATED_GROUP]);
        let again = user.clone().with_authenticated_group();
        assert_eq!(again, user);
    }

    #[test]
    fn anonymous_does_not_get_authenticated_group() {
        let user = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(user.groups, [UNAUTHENTICATED_GROUP]);
    }
}
