//! The taken values of one pool as a set of disjoint, non-adjacent closed intervals.
//!
//! A pool is mostly filled from its low end (Ports) or its high end (ServiceVIPs), so its taken
//! values form few long runs: a /16 filled in order is one interval. Finding the first free
//! value at or after `v` is one lookup of the interval holding `v` (its end plus one is free,
//! because neighbouring intervals are merged), so a pick costs `O(log runs)` however full the
//! pool is, and so do insert and remove. A bitmap would not fit an IPv6 /64; this does.

use std::collections::BTreeMap;

/// A set of `u128` stored as runs: `start → end`, both inclusive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntervalSet {
    runs: BTreeMap<u128, u128>,
    len: u128,
}

impl IntervalSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many values the set holds (saturating).
    pub fn len(&self) -> u128 {
        self.len
    }

    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many runs the set is made of.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The run holding `v`, if any.
    fn run_of(&self, v: u128) -> Option<(u128, u128)> {
        self.runs
            .range(..=v)
            .next_back()
            .filter(|(_, e)| **e >= v)
            .map(|(s, e)| (*s, *e))
    }

    /// Whether `v` is in the set.
    pub fn contains(&self, v: u128) -> bool {
        self.run_of(v).is_some()
    }

    /// Adds `v`; `false` if it was there already.
    pub fn insert(&mut self, v: u128) -> bool {
        if self.contains(v) {
            return false;
        }
        let mut start = v;
        let mut end = v;
        // A run ending just below `v` grows up to it…
        if let Some(below) = v.checked_sub(1)
            && let Some((s, _)) = self.run_of(below)
        {
            self.runs.remove(&s);
            start = s;
        }
        // …and one starting just above it is joined.
        if let Some(above) = v.checked_add(1)
            && let Some(e) = self.runs.remove(&above)
        {
            end = e;
        }
        self.runs.insert(start, end);
        self.len = self.len.saturating_add(1);
        true
    }

    /// Removes `v`; `false` if it was not there.
    pub fn remove(&mut self, v: u128) -> bool {
        let Some((s, e)) = self.run_of(v) else {
            return false;
        };
        self.runs.remove(&s);
        if s < v {
            self.runs.insert(s, v - 1);
        }
        if v < e {
            self.runs.insert(v + 1, e);
        }
        self.len = self.len.saturating_sub(1);
        true
    }

    /// The lowest value of `from..=hi` not in the set.
    pub fn first_free(&self, from: u128, hi: u128) -> Option<u128> {
        let cand = match self.run_of(from) {
            Some((_, e)) => e.checked_add(1)?,
            None => from,
        };
        (cand <= hi).then_some(cand)
    }

    /// The highest value of `lo..=from` not in the set.
    pub fn last_free(&self, lo: u128, from: u128) -> Option<u128> {
        let cand = match self.run_of(from) {
            Some((s, _)) => s.checked_sub(1)?,
            None => from,
        };
        (cand >= lo).then_some(cand)
    }

    /// Every value, in order (for tests and small sets).
    pub fn iter(&self) -> impl Iterator<Item = u128> + '_ {
        self.runs.iter().flat_map(|(s, e)| *s..=*e)
    }
}

impl FromIterator<u128> for IntervalSet {
    fn from_iter<I: IntoIterator<Item = u128>>(iter: I) -> Self {
        let mut s = Self::new();
        for v in iter {
            s.insert(v);
        }
        s
    }
}

/// The first value of `lo..=hi` (the last if `down`) that is neither in `taken` nor accepted
/// by `excluded`. `excluded` holds few values (in-flight picks, keys lost in this request), so
/// stepping over them one by one stays cheap.
pub fn pick(
    taken: &IntervalSet,
    (lo, hi): (u128, u128),
    down: bool,
    excluded: impl Fn(u128) -> bool,
) -> Option<u128> {
    if lo > hi {
        return None;
    }
    if down {
        let mut from = hi;
        loop {
            let v = taken.last_free(lo, from)?;
            if !excluded(v) {
                return Some(v);
            }
            from = v.checked_sub(1).filter(|f| *f >= lo)?;
        }
    } else {
        let mut from = lo;
        loop {
            let v = taken.first_free(from, hi)?;
            if !excluded(v) {
                return Some(v);
            }
            from = v.checked_add(1).filter(|f| *f <= hi)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// The runs are sorted, disjoint, not adjacent, and `len` counts them.
    fn check_shape(s: &IntervalSet) {
        let mut prev: Option<u128> = None;
        let mut len = 0u128;
        for (a, b) in &s.runs {
            assert!(a <= b, "run {a}..={b}");
            if let Some(p) = prev {
                assert!(*a > p + 1, "runs touch or overlap at {p}/{a}");
            }
            prev = Some(*b);
            len += b - a + 1;
        }
        assert_eq!(len, s.len());
    }

    #[test]
    fn runs_merge_and_split() {
        let mut s: IntervalSet = [2, 3, 5].into_iter().collect();
        assert_eq!(s.runs(), 2);
        assert!(s.insert(4));
        assert_eq!(s.runs(), 1);
        assert!(!s.insert(4));
        assert!(s.remove(3));
        assert_eq!(s.runs(), 2);
        assert_eq!(s.first_free(2, 9), Some(3));
        assert_eq!(s.first_free(4, 9), Some(6));
        assert_eq!(s.last_free(0, 5), Some(3));
        assert_eq!(s.last_free(4, 5), None);
        check_shape(&s);
        let mut edge = IntervalSet::new();
        assert!(edge.insert(u128::MAX));
        assert!(edge.insert(0));
        assert_eq!(edge.first_free(u128::MAX, u128::MAX), None);
        assert_eq!(edge.last_free(0, 0), None);
        assert_eq!(edge.first_free(0, 5), Some(1));
    }

    #[test]
    fn pick_steps_over_exclusions_both_ways() {
        let taken: IntervalSet = [2, 3, 5].into_iter().collect();
        assert_eq!(pick(&taken, (2, 9), false, |_| false), Some(4));
        assert_eq!(pick(&taken, (2, 9), false, |v| v == 4), Some(6));
        assert_eq!(pick(&taken, (2, 5), false, |v| v == 4), None);
        let top: IntervalSet = [9, 8].into_iter().collect();
        assert_eq!(pick(&top, (2, 9), true, |_| false), Some(7));
        assert_eq!(pick(&top, (8, 9), true, |_| false), None);
        assert_eq!(pick(&IntervalSet::new(), (2, 9), true, |_| false), Some(9));
        assert_eq!(pick(&IntervalSet::new(), (9, 2), false, |_| false), None);
    }

    #[derive(Clone, Debug)]
    enum Step {
        Take(u8),
        Release(u8),
        /// Pick the lowest (or highest) free value of a range, excluding some values, and take it.
        Allocate {
            lo: u8,
            hi: u8,
            down: bool,
            excluded: Vec<u8>,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            any::<u8>().prop_map(|v| Step::Take(v % 80)),
            any::<u8>().prop_map(|v| Step::Release(v % 80)),
            (
                0u8..80,
                0u8..80,
                any::<bool>(),
                prop::collection::vec(0u8..80, 0..4)
            )
                .prop_map(|(lo, hi, down, excluded)| Step::Allocate {
                    lo,
                    hi,
                    down,
                    excluded
                }),
        ]
    }

    proptest! {
        /// Against a plain set: an allocation never returns a taken or excluded value, returns
        /// the lowest (highest) free one, and finds one whenever one exists; releases make
        /// values allocatable again.
        #[test]
        fn allocate_release_sequences_match_a_plain_set(steps in prop::collection::vec(step(), 1..300)) {
            let mut s = IntervalSet::new();
            let mut model: BTreeSet<u128> = BTreeSet::new();
            for st in steps {
                match st {
                    Step::Take(v) => prop_assert_eq!(s.insert(u128::from(v)), model.insert(u128::from(v))),
                    Step::Release(v) => prop_assert_eq!(s.remove(u128::from(v)), model.remove(&u128::from(v))),
                    Step::Allocate { lo, hi, down, excluded } => {
                        let (lo, hi) = (u128::from(lo), u128::from(hi));
                        let ex: BTreeSet<u128> = excluded.into_iter().map(u128::from).collect();
                        let free = |v: &u128| !model.contains(v) && !ex.contains(v);
                        let want = if lo > hi {
                            None
                        } else if down {
                            (lo..=hi).rev().find(free)
                        } else {
                            (lo..=hi).find(free)
                        };
                        let got = pick(&s, (lo, hi), down, |v| ex.contains(&v));
                        prop_assert_eq!(got, want);
                        if let Some(v) = got {
                            prop_assert!(!model.contains(&v));
                            prop_assert!(s.insert(v));
                            model.insert(v);
                        }
                    }
                }
                check_shape(&s);
                prop_assert_eq!(s.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            }
        }
    }
}
