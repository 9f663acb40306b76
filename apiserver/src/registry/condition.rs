//! Status conditions as the kinds derive them (`metav1.Condition`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition `ty` of an object at `generation`; `lastTransitionTime` is kept from `prev` (the
/// stored conditions) while the status stays the same, so deriving twice from one state gives
/// equal values and a controller writes nothing.
pub fn condition(
    prev: &[Condition],
    ty: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = prev
        .iter()
        .find(|c| c.type_ == ty && c.status == status)
        .map_or_else(now, |c| c.last_transition_time.clone());
    Condition {
        type_: ty.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time,
        observed_generation: Some(generation),
    }
}

/// Now, with the second precision of Kubernetes timestamps.
fn now() -> Time {
    let t = Timestamp::now();
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let old = Time(Timestamp::from_second(1_000).unwrap());
        let prev = [Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: old.clone(),
            observed_generation: Some(1),
        }];
        let same = condition(&prev, "Ready", true, "R", "m", 2);
        assert_eq!(same.last_transition_time, old);
        assert_eq!(same.observed_generation, Some(2));
        let flipped = condition(&prev, "Ready", false, "R", "m", 2);
        assert_ne!(flipped.last_transition_time, old);
    }
}
