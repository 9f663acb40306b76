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

    use proptest::prelude::*;

    use super::*;

    const M: usize = cozyplane_bpf::abi::LB_SLOTS;

    fn names(ids: &[u32]) -> Vec<[u8; 4]> {
        ids.iter().map(|i| i.to_be_bytes()).collect()
    }

    fn is_prime(n: usize) -> bool {
        n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| !n.is_multiple_of(d))
    }

    // The permutation of a backend visits every slot only if its skip is coprime with the
    // size: a prime makes every skip in 1..size so.
    #[test]
    fn both_table_sizes_are_prime() {
        assert!(is_prime(cozyplane_bpf::abi::LB_SLOTS));
        assert!(is_prime(cozyplane_bpf::abi::LB_BIG_SLOTS));
        assert!(!is_prime(1023) && !is_prime(32751), "the check itself tells");
    }

    /// One backend of `n` removed from a table of `size`, over `sets` sets of distinct
    /// backends (identities as the writer hashes them: an IPv4 address in 10/8 and port
    /// 8080, from a fixed seed): for each set, the fraction of the slots of the surviving
    /// backends that changed hands. What `lab/benches/services.rs` measures.
    fn remap(size: usize, n: usize, sets: usize) -> Vec<f64> {
        // splitmix64: a fixed, dependency-free stream of addresses.
        let mut state: u64 = 26;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        (0..sets)
            .map(|_| {
                let mut ids: Vec<Vec<u8>> = Vec::new();
                while ids.len() < n {
                    let a = 0x0a00_0000 | (next() as u32 & 0x00ff_ffff);
                    let mut v = a.to_be_bytes().to_vec();
                    v.extend_from_slice(&8080u16.to_be_bytes());
                    if !ids.contains(&v) {
                        ids.push(v);
                    }
                }
                let gone = (next() % n as u64) as usize;
                let before = table(&ids, size);
                let rest: Vec<&Vec<u8>> = ids
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != gone)
                    .map(|(_, v)| v)
                    .collect();
                let after = table(&rest, size);
                let (mut kept, mut moved) = (0usize, 0usize);
                for (b, a) in before.iter().zip(&after) {
                    if *b == gone {
                        continue;
                    }
                    kept += 1;
                    // `after` indexes `rest`: past `gone`, one less than in `ids`.
                    let was = if *a < gone { *a } else { *a + 1 };
                    moved += usize::from(was != *b);
                }
                moved as f64 / kept as f64
            })
            .collect()
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    // Issue 26's bound: removing one of 100 backends moves at most ~1 % of the other
    // backends' slots. Measured with the big table a frontend of that many backends gets
    // (0.86 % on average over these 20 sets, 0.94 % at most; the small table's 1021 slots
    // give 3.33 %, which this bound rejects), and at the writer's two thresholds, the
    // fewest backends a big table serves (0.79 % at 64, 0.62 % at 32). Not asserted: the
    // big table's worst, 1.3 % around 300 backends, where the disruption peaks before it
    // falls again (0.59 % at 1,000).
    #[test]
    fn removing_one_of_100_backends_moves_at_most_one_percent_of_the_others_slots() {
        use super::super::{BIG_FROM, BIG_UNTIL};
        let big = cozyplane_bpf::abi::LB_BIG_SLOTS;
        for n in [100, BIG_FROM, BIG_UNTIL] {
            let r = remap(big, n, 20);
            let (m, max) = (mean(&r), r.iter().copied().fold(0.0, f64::max));
            assert!(
                m <= 0.010,
                "{n} backends, {big} slots: {:.2} % of the others' slots moved on average",
                100.0 * m
            );
            assert!(
                max <= 0.0125,
                "{n} backends, {big} slots: {:.2} % in one set",
                100.0 * max
            );
        }
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

    // Maglev's disturbance in the small table, on average: removing one of n backends moves
    // at most ~5 % of the others' slots (measured: 0.5 % at 3 backends, 5.0 % at 47, over
    // 200 seeded sets each). A fixed seed: the same sets every run.
    #[test]
    fn removing_a_backend_moves_few_of_the_others_slots_on_average() {
        let mut rng: u64 = 0x6d61_676c_6576;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for n in [3usize, 8, 16, 32, 47] {
            let mut sum = 0.0;
            for _ in 0..200 {
                let ids: Vec<u32> = (0..n).map(|_| next() as u32).collect();
                let gone = next() as usize % n;
                let before = table(&names(&ids), M);
                let rest: Vec<u32> = ids
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != gone)
                    .map(|(_, v)| *v)
                    .collect();
                let after = table(&names(&rest), M);
                let moved = (0..M)
                    .filter(|s| before[*s] != gone && ids[before[*s]] != rest[after[*s]])
                    .count();
                sum += moved as f64 / M as f64;
            }
            let mean = sum / 200.0;
            assert!(
                mean <= 0.06,
                "{n} backends: {:.2} % of the others' slots moved on average",
                100.0 * mean
            );
        }
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

        // Removing one backend frees its own slots, and no slot names it afterwards. How
        // many of the others' slots move too is Maglev's disturbance: a few percent on
        // average (the seeded test below), but for one unlucky set of a few backends a
        // fifth or more (35 % of 1021 slots seen for 4 backends), so it is no per-case bound.
        #[test]
        fn removing_a_backend_frees_its_slots(
            ids in prop::collection::btree_set(any::<u32>(), 3..48),
            pick in any::<prop::sample::Index>(),
        ) {
            let ids: Vec<u32> = ids.into_iter().collect();
            let gone = pick.index(ids.len());
            let before = table(&names(&ids), M);
            let rest: Vec<u32> = ids.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, v)| *v).collect();
            let after = table(&names(&rest), M);
            prop_assert_eq!(after.len(), M);
            for slot in 0..M {
                prop_assert_ne!(rest[after[slot]], ids[gone]);
                prop_assert!(before[slot] < ids.len());
            }
        }
    }
}
