//! A pod/node IP allocator over one CIDR: sequential hand-out like the CNI `host-local` IPAM plugin
//! (which continues after the last address it gave out and only wraps around once the range is used
//! up), so a replaced pod normally gets a fresh address rather than its predecessor's.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Errors from [`IpAllocator`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpAllocError {
    #[error("cidr {cidr} has no assignable addresses left")]
    Exhausted { cidr: IpNet },
    #[error("cidr {cidr} has no assignable addresses")]
    Empty { cidr: IpNet },
}

/// Hands out the addresses of one CIDR in order, skipping the network address (and, for IPv4 ranges
/// wider than /31, the broadcast address). Inside 127.0.0.0/8 it also skips 127.0.0.1, so tests'
/// own loopback servers never collide with a simulated pod.
#[derive(Debug, Clone)]
pub struct IpAllocator {
    net: IpNet,
    /// Offset (from the network address) of the first assignable address.
    first: u128,
    /// Offset of the last assignable address.
    last: u128,
    /// Next never-used offset; `last + 1` once the range has been walked once.
    cursor: u128,
    /// Offsets released after being handed out; reused, lowest first, once `cursor` is past `last`.
    released: BTreeSet<u128>,
    /// Offsets currently handed out.
    in_use: usize,
}

impl IpAllocator {
    pub fn new(net: IpNet) -> Result<Self, IpAllocError> {
        let net = net.trunc();
        let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
        let size: u128 = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        // `size` is the largest offset inside the network.
        let mut first = 0u128;
        let mut last = size;
        if host_bits >= 2 {
            // The network address is never a host; neither is the IPv4 broadcast address.
            first = 1;
            if matches!(net, IpNet::V4(_)) {
                last = size - 1;
            }
        }
        let loopback_one = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        if let IpNet::V4(n) = net
            && net.contains(&loopback_one)
        {
            // 127.0.0.0 and 127.0.0.1 (where the tests' own servers listen) are the two lowest
            // addresses of any range holding them.
            let one = u128::from(u32::from(Ipv4Addr::new(127, 0, 0, 1)) - u32::from(n.network()));
            first = first.max(one + 1);
        }
        if first > last {
            return Err(IpAllocError::Empty { cidr: net });
        }
        Ok(IpAllocator {
            net,
            first,
            last,
            cursor: first,
            released: BTreeSet::new(),
            in_use: 0,
        })
    }

    /// An allocator over `net` that hands out nothing: for a CIDR without host addresses, so that
    /// callers degrade to "exhausted" instead of failing outright.
    pub fn empty(net: IpNet) -> Self {
        IpAllocator {
            net: net.trunc(),
            first: 1,
            last: 0,
            cursor: 1,
            released: BTreeSet::new(),
            in_use: 0,
        }
    }

    /// The CIDR this allocator hands out from.
    pub fn net(&self) -> IpNet {
        self.net
    }

    /// How many addresses are handed out now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// The next free address: a never-used one while there are any, else the lowest released one.
    pub fn allocate(&mut self) -> Result<IpAddr, IpAllocError> {
        let offset = if self.cursor <= self.last {
            let o = self.cursor;
            self.cursor += 1;
            o
        } else if let Some(o) = self.released.pop_first() {
            o
        } else {
            return Err(IpAllocError::Exhausted { cidr: self.net });
        };
        self.in_use += 1;
        Ok(self.addr_at(offset))
    }

    /// Give an address back. Returns false (and changes nothing) when it was not handed out by this
    /// allocator or is already free.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        let Some(offset) = self.offset_of(ip) else {
            return false;
        };
        if offset < self.first || offset > self.last || offset >= self.cursor {
            return false;
        }
        if !self.released.insert(offset) {
            return false;
        }
        self.in_use -= 1;
        true
    }

    /// Whether `ip` is currently handed out.
    pub fn is_allocated(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|o| {
            o >= self.first && o <= self.last && o < self.cursor && !self.released.contains(&o)
        })
    }

    fn offset_of(&self, ip: IpAddr) -> Option<u128> {
        if !self.net.contains(&ip) {
            return None;
        }
        match (self.net, ip) {
            (IpNet::V4(n), IpAddr::V4(a)) => {
                Some(u128::from(u32::from(a) - u32::from(n.network())))
            }
            (IpNet::V6(n), IpAddr::V6(a)) => Some(u128::from(a) - u128::from(n.network())),
            _ => None,
        }
    }

    fn addr_at(&self, offset: u128) -> IpAddr {
        match self.net {
            IpNet::V4(n) => {
                let base = u32::from(n.network());
                let off = u32::try_from(offset).expect("an IPv4 offset always fits in 32 bits");
                IpAddr::V4(Ipv4Addr::from(base + off))
            }
            IpNet::V6(n) => IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) + offset)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_hands_out_sequentially_skipping_network_and_broadcast() {
        let mut a = IpAllocator::new(net("10.1.2.0/30")).unwrap();
        assert_eq!(a.allocate().unwrap().to_string(), "10.1.2.1");
        assert_eq!(a.allocate().unwrap().to_string(), "10.1.2.2");
        assert_eq!(
            a.allocate(),
            Err(IpAllocError::Exhausted {
                cidr: net("10.1.2.0/30")
            })
        );
        assert_eq!(a.in_use(), 2);
    }

    #[test]
    fn released_addresses_are_reused_only_after_the_range_is_walked() {
        let mut a = IpAllocator::new(net("10.0.0.0/29")).unwrap();
        let first = a.allocate().unwrap();
        assert!(a.release(first));
        assert!(!a.release(first), "double release is refused");
        let next = a.allocate().unwrap();
        assert_ne!(next, first, "a fresh address comes before reuse");
        for _ in 0..4 {
            a.allocate().unwrap();
        }
        assert_eq!(
            a.allocate().unwrap(),
            first,
            "wrapped around to the released one"
        );
        assert!(a.allocate().is_err());
    }

    #[test]
    fn loopback_skips_127_0_0_0_and_127_0_0_1() {
        let mut a = IpAllocator::new(net("127.0.0.0/8")).unwrap();
        assert_eq!(a.allocate().unwrap().to_string(), "127.0.0.2");
        let mut b = IpAllocator::new(net("127.5.0.0/16")).unwrap();
        assert_eq!(b.allocate().unwrap().to_string(), "127.5.0.1");
    }

    #[test]
    fn ipv6_ranges_work_and_keep_the_last_address() {
        let mut a = IpAllocator::new(net("fd00::/126")).unwrap();
        let got: Vec<String> = (0..3).map(|_| a.allocate().unwrap().to_string()).collect();
        assert_eq!(got, ["fd00::1", "fd00::2", "fd00::3"]);
        assert!(a.allocate().is_err());
        assert!(a.is_allocated("fd00::2".parse().unwrap()));
        assert!(!a.release("fd01::2".parse().unwrap()), "outside the cidr");
    }

    #[test]
    fn a_cidr_without_host_addresses_is_refused() {
        assert!(matches!(
            IpAllocator::new(net("127.0.0.0/31")),
            Err(IpAllocError::Empty { .. })
        ));
        let mut empty = IpAllocator::empty(net("127.0.0.0/31"));
        assert!(matches!(
            empty.allocate(),
            Err(IpAllocError::Exhausted { .. })
        ));
        assert!(!empty.release("127.0.0.0".parse().unwrap()));
        assert!(matches!(
            IpAllocator::new(net("127.0.0.1/32")),
            Err(IpAllocError::Empty { .. })
        ));
        assert_eq!(
            IpAllocator::new(net("10.0.0.7/32"))
                .unwrap()
                .allocate()
                .unwrap()
                .to_string(),
            "10.0.0.7"
        );
    }
}
