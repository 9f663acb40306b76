//! Between the store's types and etcd's: a [`Txn`] as an etcd transaction and etcd's answer to
//! it, etcd's items, revisions and read errors.

use bytes::Bytes;
use etcd_client::{
    Compare as EtcdCompare, CompareOp, DeleteOptions, PutOptions, Txn as EtcdTxn, TxnOp, TxnOpResponse,
};

use crate::{Compare, Error, KeyValue, Op, Result, Revision, Txn, TxnResponse};

/// The etcd transaction of `txn`: its puts and deletes return the items they replace, and when
/// a compare fails, every compared key is read.
pub(super) fn etcd_txn(txn: &Txn) -> EtcdTxn {
    let compares: Vec<EtcdCompare> = txn
        .compares
        .iter()
        .map(|c| match c {
            Compare::Exists(k) => EtcdCompare::create_revision(k.as_str(), CompareOp::Greater, 0),
            Compare::Absent(k) => EtcdCompare::create_revision(k.as_str(), CompareOp::Equal, 0),
            Compare::ModRevision(k, r) => EtcdCompare::mod_revision(k.as_str(), CompareOp::Equal, *r as i64),
        })
        .collect();
    let ops: Vec<TxnOp> = txn
        .ops
        .iter()
        .map(|op| match op {
            Op::Put { key, value } => TxnOp::put(
                key.as_str(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            ),
            Op::Delete { key } => TxnOp::delete(key.as_str(), Some(DeleteOptions::new().with_prev_key())),
        })
        .collect();
    let reads: Vec<TxnOp> = txn.compares.iter().map(|c| TxnOp::get(c.key(), None)).collect();
    EtcdTxn::new().when(compares).and_then(ops).or_else(reads)
}

/// etcd's answer to [`etcd_txn`] as a [`TxnResponse`].
pub(super) fn txn_response(txn: &Txn, resp: &etcd_client::TxnResponse) -> Result<TxnResponse> {
    let mut out = TxnResponse {
        succeeded: resp.succeeded(),
        revision: header_revision(resp.header()),
        current: Vec::new(),
        prev: Vec::new(),
    };
    for (i, r) in resp.op_responses().into_iter().enumerate() {
        match r {
            TxnOpResponse::Put(mut p) => out.prev.push(p.take_prev_key().map(to_kv).transpose()?),
            TxnOpResponse::Delete(mut d) => {
                out.prev
                    .push(d.take_prev_kvs().into_iter().next().map(to_kv).transpose()?);
            }
            TxnOpResponse::Get(mut g) => {
                let item = g.take_kvs().into_iter().next().map(to_kv).transpose()?;
                out.current.push((txn.compares[i].key().to_string(), item));
            }
            TxnOpResponse::Txn(_) => return Err(Error::internal("etcd answered a nested transaction")),
        }
    }
    Ok(out)
}

pub(super) fn to_kv(kv: etcd_client::KeyValue) -> Result<KeyValue> {
    let (create_revision, mod_revision) = (kv.create_revision() as Revision, kv.mod_revision() as Revision);
    let (key, value) = kv.into_key_value();
    let key = String::from_utf8(key).map_err(|_| Error::internal("etcd returned a non-UTF-8 key"))?;
    Ok(KeyValue {
        key,
        value: Bytes::from(value),
        create_revision,
        mod_revision,
    })
}

pub(super) fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| h.revision() as Revision)
}

/// Map an etcd read error; `requested` is the revision the read asked for.
pub(super) fn read_error(e: &etcd_client::Error, requested: Revision, from_token: bool) -> Error {
    let msg = e.to_string();
    if msg.contains("required revision has been compacted") {
        // etcd does not say where history starts; 0 marks "unknown".
        if from_token {
            Error::Expired {
                requested,
                compacted: 0,
            }
        } else {
            Error::Gone {
                requested,
                compacted: 0,
            }
        }
    } else if msg.contains("required revision is a future revision") {
        Error::FutureRevision {
            requested,
            current: 0,
        }
    } else {
        Error::unavailable(msg)
    }
}
