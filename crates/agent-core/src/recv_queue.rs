//! The receive queue of an event stream (the peer's `recvq`, internal/queue/queue.go): events
//! read from the stream wait here, in order, for a handler. At most `ARGOCD_AGENT_RECV_QUEUE_SIZE`
//! wait (the peer's default 1000); when it is full the stream is not read until one is taken, so
//! HTTP/2 flow control holds the sender back (the peer instead drops the oldest waiting event,
//! which its sender resends). Counted as the `<name>-recv` workqueue
//! ([`crate::workqueue_metrics`]).

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::workqueue_metrics::Workqueue;

/// The reading end's side: puts events in.
pub struct RecvQueue<T> {
    /// Boxed: a channel allocates its first block of 32 slots up front, which with an event
    /// inline was ~9 KiB per idle stream.
    tx: mpsc::Sender<Box<(T, Instant)>>,
    wq: Workqueue,
}

/// The handlers' side: takes events out.
pub struct RecvQueueRx<T> {
    rx: mpsc::Receiver<Box<(T, Instant)>>,
    wq: Workqueue,
}

/// A queue holding at most `size` (at least 1) waiting events, counted in `wq`.
pub fn channel<T>(size: usize, wq: Workqueue) -> (RecvQueue<T>, RecvQueueRx<T>) {
    let (tx, rx) = mpsc::channel(size.max(1));
    (RecvQueue { tx, wq: wq.clone() }, RecvQueueRx { rx, wq })
}

impl<T> RecvQueue<T> {
    /// Whether nothing waits (nor is being put in).
    pub fn is_empty(&self) -> bool {
        self.tx.capacity() == self.tx.max_capacity()
    }

    /// Counts an event handed to a free handler at once, without waiting here: put and taken
    /// in the same instant.
    pub fn passed_through(&self) {
        self.wq.add();
        self.wq.taken(0.0);
    }

    /// Puts `item` in, waiting for room. `Err(item)`: the taking side is gone.
    pub async fn put(&self, item: T) -> Result<(), T> {
        let Ok(slot) = self.tx.reserve().await else {
            return Err(item);
        };
        self.wq.add();
        self.wq.inc_depth();
        slot.send(Box::new((item, Instant::now())));
        Ok(())
    }
}

impl<T> RecvQueueRx<T> {
    /// The oldest waiting event, waiting for one; `None` once the putting side is gone and the
    /// queue is empty.
    pub async fn take(&mut self) -> Option<T> {
        let (item, at) = *self.rx.recv().await?;
        self.wq.dec_depth();
        self.wq.taken(at.elapsed().as_secs_f64());
        Some(item)
    }
}

impl<T> Drop for RecvQueueRx<T> {
    fn drop(&mut self) {
        // what still waits is dropped with the stream (the sender resends what it had no ACK for)
        self.rx.close();
        while self.rx.try_recv().is_ok() {
            self.wq.dec_depth();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn holds_at_most_its_size_in_order_and_counts() {
        let wq = Workqueue::default();
        let (tx, mut rx) = channel::<u32>(2, wq.clone());
        assert!(tx.is_empty());
        tx.put(1).await.unwrap();
        assert!(!tx.is_empty());
        tx.put(2).await.unwrap();
        assert_eq!(wq.depth(), 2);
        // the third waits for room
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), tx.put(3)).await;
        assert!(third.is_err(), "full: the put waits");
        assert_eq!(wq.depth(), 2);
        assert_eq!(rx.take().await, Some(1));
        assert_eq!(wq.depth(), 1);
        tx.put(3).await.unwrap();
        assert_eq!(rx.take().await, Some(2));
        assert_eq!(rx.take().await, Some(3));
        assert_eq!(wq.depth(), 0);
        assert!(tx.is_empty());
        assert_eq!(wq.adds(), 3);
        tx.passed_through();
        assert_eq!((wq.adds(), wq.depth()), (4, 0));
        tx.put(4).await.unwrap();
        drop(rx);
        assert_eq!(wq.depth(), 0, "dropped with the stream");
        assert_eq!(tx.put(5).await, Err(5));
    }
}
