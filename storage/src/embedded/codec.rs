//! The on-disk encoding of the embedded store: stored items and logged events.
//!
//! Hand-rolled little-endian fields with length prefixes: the records are tiny, read on every
//! request and must decode without allocating more than the value itself.

use bytes::Bytes;

use crate::{Error, Event, KeyValue, Result, Revision};

/// A stored item: `create_revision`, `mod_revision`, value.
pub(super) fn encode_item(create: Revision, modified: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create.to_le_bytes());
    out.extend_from_slice(&modified.to_le_bytes());
    out.extend_from_slice(value);
    out
}

pub(super) fn decode_item(key: &str, raw: &[u8]) -> Result<KeyValue> {
    let mut r = Reader { buf: raw };
    let create_revision = r.u64()?;
    let mod_revision = r.u64()?;
    Ok(KeyValue {
        key: key.to_string(),
        value: Bytes::copy_from_slice(r.buf),
        create_revision,
        mod_revision,
    })
}

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// The events of one revision, as the log stores them.
pub(super) fn encode_events(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for ev in events {
        match ev {
            Event::Put { kv, prev } => {
                out.push(PUT);
                put_str(&mut out, &kv.key);
                out.extend_from_slice(&kv.create_revision.to_le_bytes());
                put_bytes(&mut out, &kv.value);
                put_prev(&mut out, prev.as_ref());
            }
            Event::Delete { key, prev, .. } => {
                out.push(DELETE);
                put_str(&mut out, key);
                put_prev(&mut out, prev.as_ref());
            }
            Event::Progress { .. } => unreachable!("progress is never logged"),
        }
    }
    out
}

pub(super) fn decode_events(revision: Revision, raw: &[u8]) -> Result<Vec<Event>> {
    let mut r = Reader { buf: raw };
    let mut events = Vec::new();
    while !r.buf.is_empty() {
        let tag = r.u8()?;
        let key = r.string()?;
        match tag {
            PUT => {
                let create_revision = r.u64()?;
                let value = r.bytes()?;
                let prev = r.prev(&key)?;
                events.push(Event::Put {
                    kv: KeyValue {
                        key,
                        value,
                        create_revision,
                        mod_revision: revision,
                    },
                    prev,
                });
            }
            DELETE => {
                let prev = r.prev(&key)?;
                events.push(Event::Delete { key, revision, prev });
            }
            other => return Err(corrupt(format!("unknown event tag {other}"))),
        }
    }
    Ok(events)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len()).expect("values are bounded far below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
}

fn put_prev(out: &mut Vec<u8>, prev: Option<&KeyValue>) {
    match prev {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            out.extend_from_slice(&p.create_revision.to_le_bytes());
            out.extend_from_slice(&p.mod_revision.to_le_bytes());
            put_bytes(out, &p.value);
        }
    }
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::internal(format!("embedded store record is corrupt: {what}"))
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.buf.len() < n {
            return Err(corrupt(format!("{n} bytes wanted, {} left", self.buf.len())));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self) -> Result<Bytes> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }

    fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| corrupt("key is not UTF-8"))
    }

    fn prev(&mut self, key: &str) -> Result<Option<KeyValue>> {
        if self.u8()? == 0 {
            return Ok(None);
        }
        let create_revision = self.u64()?;
        let mod_revision = self.u64()?;
        let value = self.bytes()?;
        Ok(Some(KeyValue {
            key: key.to_string(),
            value,
            create_revision,
            mod_revision,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kv(key: String, value: Vec<u8>, c: u64, m: u64) -> KeyValue {
        KeyValue {
            key,
            value: value.into(),
            create_revision: c,
            mod_revision: m,
        }
    }

    proptest! {
        #[test]
        fn items_round_trip(key in ".{0,20}", value in proptest::collection::vec(any::<u8>(), 0..64),
                            c in any::<u64>(), m in any::<u64>()) {
            let raw = encode_item(c, m, &value);
            prop_assert_eq!(decode_item(&key, &raw).unwrap(), kv(key.clone(), value, c, m));
        }

        #[test]
        fn events_round_trip(keys in proptest::collection::vec(".{1,12}", 1..5),
                             value in proptest::collection::vec(any::<u8>(), 0..32),
                             rev in 2u64..1_000_000) {
            let events: Vec<Event> = keys.iter().enumerate().map(|(i, k)| {
                let prev = (i % 2 == 0).then(|| kv(k.clone(), value.clone(), 1, rev - 1));
                if i % 3 == 0 {
                    Event::Delete { key: k.clone(), revision: rev, prev }
                } else {
                    Event::Put { kv: kv(k.clone(), value.clone(), 1, rev), prev }
                }
            }).collect();
            prop_assert_eq!(decode_events(rev, &encode_events(&events)).unwrap(), events);
        }

        #[test]
        fn garbage_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_events(7, &raw);
            let _ = decode_item("k", &raw);
        }
    }
}
