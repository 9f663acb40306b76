//! `skip_serializing_if` predicates: Go's `omitempty` drops zero values, and so do we, so a
//! stored object reads back the way the Go server would print it.

pub(crate) fn is_zero(v: &i32) -> bool {
    *v == 0
}

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}
