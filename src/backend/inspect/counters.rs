//! `metrics`, `check` and `status`: reading each lock's counters (`{K}:stats`, its waiters
//! and the server's clock) on every node. What they mean is `backend::counters`'.

use super::Inspector;
use crate::backend::counters::{read_counters, NodeCounters};
use crate::backend::layout::Key;

impl Inspector {
    /// The counters of each of `keys` on every node (`{K}:stats`, its waiters and the
    /// server's clock), per key, one result per node. A node that fails is not asked again.
    pub fn counters(&mut self, keys: &[Key]) -> Vec<Vec<Result<NodeCounters, String>>> {
        let per_node = self.on_every_node(|link| {
            if !link.is_cluster() {
                return super::batch::read_counters_of(link, keys);
            }
            let mut read = Vec::with_capacity(keys.len());
            for key in keys {
                let call = read_counters(key);
                match link.call(None, |session| session.run(&call)) {
                    Ok(reply) => read.push(Ok(NodeCounters::read(key, reply))),
                    Err(err) => {
                        read.resize(keys.len(), Err(format!("{err:#}")));
                        break;
                    }
                }
            }
            read
        });
        (0..keys.len())
            .map(|index| per_node.iter().map(|read| read[index].clone()).collect())
            .collect()
    }
}
