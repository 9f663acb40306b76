//! MAC addresses, as pinned on persistent Ports (`spec.mac`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Error, Result};

/// A 48-bit MAC address. Text form: six lower-case hex octets separated by `:`
/// (`02:00:0a:00:00:02`); parsing also accepts upper case and `-` separators.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// The octets, first on the wire first.
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// Group bit (least significant bit of the first octet) clear: addresses one interface.
    pub const fn is_unicast(self) -> bool {
        self.0[0] & 0x01 == 0
    }

    /// Group bit set: addresses a group (this includes broadcast).
    pub const fn is_multicast(self) -> bool {
        !self.is_unicast()
    }

    /// `ff:ff:ff:ff:ff:ff`.
    pub const fn is_broadcast(self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }

    /// Local bit (second least significant bit of the first octet) set: assigned by software,
    /// not by a vendor. Pinned Port MACs are locally administered unicast (`02:…`).
    pub const fn is_locally_administered(self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// `true` for what may be pinned on a Port: locally administered unicast.
    pub const fn is_local_unicast(self) -> bool {
        self.is_unicast() && self.is_locally_administered()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

impl FromStr for MacAddr {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidMac {
            text: text.to_owned(),
        };
        let sep = if text.contains('-') { '-' } else { ':' };
        let mut octets = [0u8; 6];
        let mut parts = text.split(sep);
        for octet in &mut octets {
            let part = parts.next().ok_or_else(invalid)?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| invalid())?;
        }
        if parts.next().is_some() {
            return Err(invalid());
        }
        Ok(Self(octets))
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(octets: [u8; 6]) -> Self {
        Self(octets)
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_common_spellings() {
        let want = MacAddr([0x02, 0x00, 0x0a, 0xbc, 0xde, 0xf0]);
        for text in ["02:00:0a:bc:de:f0", "02:00:0A:BC:DE:F0", "02-00-0a-bc-de-f0"] {
            assert_eq!(text.parse::<MacAddr>().unwrap(), want, "{text}");
        }
        assert_eq!(want.to_string(), "02:00:0a:bc:de:f0");
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "02:00:0a:bc:de",
            "02:00:0a:bc:de:f0:01",
            "2:00:0a:bc:de:f0",
            "02:00:0a:bc:de:g0",
            "02:00-0a:bc:de:f0",
            "0200.0abc.def0",
            "02::0a:bc:de:f0",
            "+2:00:0a:bc:de:f0",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn classifies_bits() {
        let pinned: MacAddr = "02:00:00:00:00:01".parse().unwrap();
        assert!(pinned.is_local_unicast());
        let vendor: MacAddr = "00:1b:21:00:00:01".parse().unwrap();
        assert!(vendor.is_unicast() && !vendor.is_locally_administered());
        let mcast: MacAddr = "01:00:5e:00:00:01".parse().unwrap();
        assert!(mcast.is_multicast() && !mcast.is_broadcast());
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
    }

    #[test]
    fn serde_uses_the_text_form() {
        let mac = MacAddr([0x02, 0, 0, 0, 0, 0x2a]);
        assert_eq!(serde_json::to_string(&mac).unwrap(), "\"02:00:00:00:00:2a\"");
        assert_eq!(
            serde_json::from_str::<MacAddr>("\"02:00:00:00:00:2A\"").unwrap(),
            mac
        );
        assert!(serde_json::from_str::<MacAddr>("\"nope\"").is_err());
    }

    proptest! {
        #[test]
        fn text_round_trips(octets: [u8; 6]) {
            let mac = MacAddr(octets);
            prop_assert_eq!(mac.to_string().parse::<MacAddr>(), Ok(mac));
            prop_assert_eq!(mac.to_string().to_uppercase().replace(':', "-").parse::<MacAddr>(), Ok(mac));
        }
    }
}
