//! Frontends of the Service load balancer (`lib/lb.h`), written as the agent's core writes
//! them: the backends, a lookup table that takes turns over them, the frontend.

use cozyplane_bpf::abi::{LB_SLOTS, LbSvc};
use cozyplane_bpf::maps::{
    lb_backends::{self, LbBackendsMap},
    lb_maglev::{self, LbMaglevMap},
    lb_svc::{self, Frontend, LbSvcMap},
};

use super::Datapath;
use super::fixtures::ip;

/// Frontend `vip:port/proto` of `net` (table `id`) balanced over `backends` (`(backend id,
/// address, target port)`, all of net 0, the Kubernetes Services' owner).
pub fn frontend(
    dp: &mut Datapath,
    net: u32,
    id: u32,
    (vip, port, proto): (&str, u16, u8),
    backends: &[(u32, &str, u16)],
) {
    for (bid, addr, tport) in backends {
        LbBackendsMap::try_from(dp.map_mut(lb_backends::NAME))
            .unwrap()
            .upsert(*bid, 0, ip(addr), *tport)
            .unwrap();
    }
    let ids: Vec<u32> = backends.iter().map(|b| b.0).collect();
    let slots: Vec<u32> = (0..LB_SLOTS)
        .map(|i| if ids.is_empty() { 0 } else { ids[i % ids.len()] })
        .collect();
    LbMaglevMap::try_from(dp.map_mut(lb_maglev::NAME))
        .unwrap()
        .set(id, &slots)
        .unwrap();
    let v = LbSvc {
        id,
        count: backends.len() as u32,
        affinity: 0,
        flags: 1,
    };
    LbSvcMap::try_from(dp.map_mut(lb_svc::NAME))
        .unwrap()
        .upsert(
            Frontend {
                net,
                vip: ip(vip),
                proto,
                port,
            },
            v,
        )
        .unwrap();
}
