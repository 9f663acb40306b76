//! List bodies assembled from encoded items: a header, the items' JSON joined by commas, and a
//! trailer with the list metadata — byte for byte what serializing the list as one JSON tree
//! gives (keys in order: `apiVersion`, `items`, `kind`, `metadata`), without building that tree.
//! A large body is streamed in chunks as it is written, so a list of many objects never holds a
//! second copy of all of them.

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};

use crate::registry::store::ListPage;

/// Bodies up to this size are sent whole (with a `Content-Length`); larger ones are streamed.
const WHOLE_UP_TO: usize = 1 << 20;
/// The size of one streamed chunk.
const CHUNK: usize = 64 << 10;

/// The `metadata` of a list page.
pub fn list_meta<T>(page: &ListPage<T>) -> Value {
    let mut meta = json!({ "resourceVersion": page.revision.to_string() });
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = page.remaining.filter(|n| *n > 0) {
        meta["remainingItemCount"] = json!(n);
    }
    meta
}

/// A list body: `kind`, `api_version`, `meta` and the encoded `items`.
pub struct ListBody {
    head: Bytes,
    items: Vec<Bytes>,
    tail: Bytes,
}

impl ListBody {
    /// The body of a list of `items` (each one object's JSON).
    pub fn new(kind: &str, api_version: &str, meta: &Value, items: Vec<Bytes>) -> Self {
        let s = |v: &str| Value::from(v).to_string();
        Self {
            head: format!("{{\"apiVersion\":{},\"items\":[", s(api_version)).into(),
            items,
            tail: format!("],\"kind\":{},\"metadata\":{meta}}}", s(kind)).into(),
        }
    }

    fn len(&self) -> usize {
        self.head.len()
            + self.tail.len()
            + self.items.iter().map(Bytes::len).sum::<usize>()
            + self.items.len().saturating_sub(1)
    }

    /// The whole body in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        out.extend_from_slice(&self.head);
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.extend_from_slice(&self.tail);
        out
    }

    /// The HTTP body: whole when small, else streamed in chunks (each item's bytes are let go
    /// once copied into a chunk).
    pub fn into_body(self) -> Body {
        if self.len() <= WHOLE_UP_TO {
            return Body::from(self.to_vec());
        }
        let Self { head, items, tail } = self;
        let state = (Some(head), items.into_iter().enumerate(), Some(tail));
        let chunks = futures::stream::unfold(state, |(mut head, mut items, mut tail)| async move {
            let mut buf = BytesMut::with_capacity(CHUNK + CHUNK / 4);
            if let Some(h) = head.take() {
                buf.extend_from_slice(&h);
            }
            while buf.len() < CHUNK {
                let Some((i, item)) = items.next() else { break };
                if i > 0 {
                    buf.extend_from_slice(b",");
                }
                buf.extend_from_slice(&item);
            }
            if buf.len() < CHUNK
                && let Some(t) = tail.take()
            {
                buf.extend_from_slice(&t);
            }
            (!buf.is_empty()).then(|| {
                (
                    Ok::<_, std::convert::Infallible>(buf.freeze()),
                    (head, items, tail),
                )
            })
        });
        Body::from_stream(chunks)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use proptest::prelude::*;

    use super::*;

    /// The body as the server built it before: one JSON tree, serialized.
    fn tree_body(kind: &str, api: &str, meta: &Value, items: &[Value]) -> Vec<u8> {
        serde_json::to_vec(&json!({ "kind": kind, "apiVersion": api, "metadata": meta, "items": items }))
            .unwrap()
    }

    fn encoded(items: &[Value]) -> Vec<Bytes> {
        items
            .iter()
            .map(|v| Bytes::from(serde_json::to_vec(v).unwrap()))
            .collect()
    }

    fn object(i: usize, pad: usize) -> Value {
        json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": "Port",
            "metadata": { "name": format!("p-{i}"), "namespace": "t\"1", "resourceVersion": i.to_string(),
                "labels": { "a": "é\u{1}" } },
            "spec": { "node": "n".repeat(pad), "n": i, "f": 1.5, "on": true, "none": null } })
    }

    async fn collect(b: ListBody) -> Vec<u8> {
        axum::body::to_bytes(b.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec()
    }

    #[tokio::test]
    async fn byte_assembled_lists_equal_the_tree_built_ones() {
        let page = ListPage::<Bytes> {
            items: Vec::new(),
            revision: 42,
            continue_token: Some("tok\"en".into()),
            remaining: Some(7),
        };
        let meta = list_meta(&page);
        for n in [0, 1, 2, 50] {
            let items: Vec<Value> = (0..n).map(|i| object(i, 10)).collect();
            let want = tree_body("PortList", "sdn.cozystack.io/v1alpha1", &meta, &items);
            let got = collect(ListBody::new(
                "PortList",
                "sdn.cozystack.io/v1alpha1",
                &meta,
                encoded(&items),
            ))
            .await;
            assert_eq!(
                String::from_utf8(got.clone()).unwrap(),
                String::from_utf8(want).unwrap()
            );
            let v: Value = serde_json::from_slice(&got).unwrap();
            assert_eq!(v["items"].as_array().unwrap().len(), n);
            assert_eq!(v["metadata"]["remainingItemCount"], 7);
        }
    }

    #[tokio::test]
    async fn a_large_list_is_streamed_in_chunks_and_still_equals_the_tree() {
        let items: Vec<Value> = (0..300).map(|i| object(i, 5000)).collect();
        let meta = json!({ "resourceVersion": "9" });
        let b = ListBody::new("PortList", "v1", &meta, encoded(&items));
        assert!(b.len() > WHOLE_UP_TO);
        let mut body = b.into_body().into_data_stream();
        let mut chunks = 0;
        let mut got = Vec::new();
        while let Some(data) = body.next().await {
            let data = data.unwrap();
            assert!(data.len() <= CHUNK + 6000);
            got.extend_from_slice(&data);
            chunks += 1;
        }
        assert!(chunks > 10, "{chunks}");
        assert_eq!(got, tree_body("PortList", "v1", &meta, &items));
    }

    proptest! {
        #[test]
        fn any_items_assemble_to_the_tree_body(
            pads in proptest::collection::vec(0usize..40, 0..20),
            rv in any::<u64>(),
            cont in proptest::option::of("[ -~]{0,12}"),
        ) {
            let items: Vec<Value> = pads.iter().enumerate().map(|(i, p)| object(i, *p)).collect();
            let page = ListPage::<Bytes> { items: Vec::new(), revision: rv, continue_token: cont, remaining: None };
            let meta = list_meta(&page);
            let got = ListBody::new("L", "g/v", &meta, encoded(&items)).to_vec();
            prop_assert_eq!(got, tree_body("L", "g/v", &meta, &items));
        }
    }
}
