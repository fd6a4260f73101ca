//! Where a delivery may go. Unless the URL's host is in the webhook's `allow_http`, the
//! URL must be https and every address its host resolves to that is loopback, private,
//! link-local, shared (CGNAT), multicast, documentation or otherwise not a public
//! unicast address is dropped *at resolution*, by the resolver the HTTP client connects
//! through: the address checked is the address connected to, so a name that resolves
//! to a public address when checked and an internal one when used (DNS rebinding)
//! reaches nothing. A host left with no address is refused. The client follows no
//! redirect and uses no proxy, so nothing sends the request elsewhere.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        // Shared address space (CGNAT), 100.64.0.0/10.
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments, 192.0.0.0/24.
        || (a == 192 && b == 0 && c == 0)
        // Benchmarking, 198.18.0.0/15.
        || (a == 198 && (b == 18 || b == 19)))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    // Addresses that carry an IPv4 address a gateway reaches: NAT64 (64:ff9b::/96) and
    // 6to4 (2002::/16) are as public as the address they carry.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [_, _, _, _, _, _, high, low] = segments;
        return is_public_v4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)));
    }
    if segments[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from(
            (u32::from(segments[1]) << 16) | u32::from(segments[2]),
        ));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        // IPv4-compatible (deprecated) and other ::/96 addresses.
        || segments[..6] == [0; 6]
        // Unique local, fc00::/7.
        || (segments[0] & 0xfe00) == 0xfc00
        // Link-local, fe80::/10; site-local (deprecated), fec0::/10.
        || (segments[0] & 0xffc0) == 0xfe80
        || (segments[0] & 0xffc0) == 0xfec0
        // Documentation, 2001:db8::/32.
        || (segments[0] == 0x2001 && segments[1] == 0xdb8))
}

/// The resolver of a webhook's client: the system's, keeping public addresses only
/// unless the webhook's host is allowed everything (`allow_http`).
#[derive(Debug)]
pub struct GuardedResolver {
    pub allow_any_address: bool,
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = DefaultResolver::default().resolve(uri, config, timeout)?;
        if self.allow_any_address {
            return Ok(resolved);
        }
        let mut kept = self.empty();
        for address in resolved.iter().filter(|a| is_public(a.ip())) {
            kept.push(*address);
        }
        if kept.is_empty() {
            return Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "refused: the host resolves to no public address (loopback, private and \
                 link-local addresses need the host in allow_http)",
            )));
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "::127.0.0.1",
        ] {
            let ip: IpAddr = internal.parse().unwrap();
            assert!(!is_public(ip), "{internal} counted as public");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "64:ff9b::5db8:d822",
        ] {
            let ip: IpAddr = public.parse().unwrap();
            assert!(is_public(ip), "{public} counted as internal");
        }
    }
}
