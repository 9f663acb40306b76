//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): the lookup table a frontend's
//! packets are balanced by in `bpf/lib/lb.h`. Each backend walks the slots in its own
//! permutation (an offset and a skip from two hashes of its identity; the table size is
//! prime, so every skip visits every slot), and the backends take turns claiming the next
//! free slot of their walk. Every backend ends up with about `slots / n` slots, and
//! removing one backend frees only its slots (plus a small disturbance), so most clients
//! keep their backend when the set changes. Established flows never move anyway (the
//! datapath pins them); this is what keeps new flows of a client steady.

/// FNV-1a, 64 bits, with a seed folded in first: stable across builds and nodes, so every
/// node computes the same table for the same backends.
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV mixes its last bytes weakly into the high bits; a final avalanche evens that out.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The table of `size` slots (a prime) over `backends` (their identities, e.g. address and
/// port bytes): each slot holds an index into `backends`. Empty without backends.
pub fn table<B: AsRef<[u8]>>(backends: &[B], size: usize) -> Vec<usize> {
    let n = backends.len();
    if n == 0 || size < 2 {
        return Vec::new();
    }
    let m = size as u64;
    let walk: Vec<(u64, u64)> = backends
        .iter()
        .map(|b| {
            let offset = fnv1a(0x6d61_676c_6576_0001, b.as_ref()) % m;
            let skip = fnv1a(0x6d61_676c_6576_0002, b.as_ref()) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; n];
    let mut slots = vec![usize::MAX; size];
    let mut filled = 0;
    'fill: loop {
        for i in 0..n {
            let (offset, skip) = walk[i];
            // The next slot in i's permutation that is still free.
            let mut c = (offset + next[i] * skip) % m;
            while slots[c as usize] != usize::MAX {
                next[i] += 1;
                c = (offset + next[i] * skip) % m;
            }
            slots[c as usize] = i;
            next[i] += 1;
            filled += 1;
            if filled == size {
                break 'fill;
            }
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    const M: usize = 1021;

    fn names(ids: &[u32]) -> Vec<[u8; 4]> {
        ids.iter().map(|i| i.to_be_bytes()).collect()
    }

    fn shares(t: &[usize], n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for s in t {
            c[*s] += 1;
        }
        c
    }

    #[test]
    fn no_backends_no_table() {
        assert!(table::<[u8; 4]>(&[], M).is_empty());
        assert_eq!(table(&names(&[7]), M), vec![0; M]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        // Each of n backends holds about 1/n of the slots: Maglev's bound is within a
        // small factor of the mean for n much smaller than the table.
        #[test]
        fn every_backend_gets_about_its_share(ids in prop::collection::btree_set(any::<u32>(), 1..64)) {
            let ids: Vec<u32> = ids.into_iter().collect();
            let n = ids.len();
            let t = table(&names(&ids), M);
            prop_assert_eq!(t.len(), M);
            let mean = M as f64 / n as f64;
            for (i, c) in shares(&t, n).into_iter().enumerate() {
                prop_assert!(c as f64 >= (mean * 0.5).floor(), "backend {} has {} slots, mean {:.1}", i, c, mean);
                prop_assert!(c as f64 <= (mean * 1.5).ceil() + 1.0, "backend {} has {} slots, mean {:.1}", i, c, mean);
            }
        }

        // Removing one backend moves its own slots and only a little more: every slot
        // that another backend held stays with it, give or take a few percent.
        #[test]
        fn removing_a_backend_moves_about_its_share(
            ids in prop::collection::btree_set(any::<u32>(), 3..48),
            pick in any::<prop::sample::Index>(),
        ) {
            let ids: Vec<u32> = ids.into_iter().collect();
            let gone = pick.index(ids.len());
            let before = table(&names(&ids), M);
            let rest: Vec<u32> = ids.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, v)| *v).collect();
            let after = table(&names(&rest), M);
            let by_id: HashMap<u32, usize> = rest.iter().enumerate().map(|(i, v)| (*v, i)).collect();
            let mut moved = 0;
            for (slot, b) in before.iter().enumerate() {
                let was = ids[*b];
                let now = rest[after[slot]];
                if was != ids[gone] && by_id[&was] != after[slot] {
                    moved += 1;
                }
                prop_assert_ne!(now, ids[gone]);
            }
            // Slots of the survivors that changed hands: a small fraction of the table.
            prop_assert!(moved as f64 <= M as f64 * 0.1, "{} of {} slots of surviving backends moved", moved, M);
        }
    }
}
