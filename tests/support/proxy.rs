//! A TCP proxy between a client and a real broker that reads MQTT packet frames and can fault
//! exactly one of them: end the connection instead of passing a packet on, or pass a changed
//! packet. It stands for the broker faults a cluster shows (a node that dies right after a
//! PUBLISH, a refused SUBSCRIBE) with mosquitto behind it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client to broker.
    Up,
    /// Broker to client.
    Down,
}

/// What to do with one packet.
pub enum Fault {
    /// Pass it on unchanged.
    Pass,
    /// Close both sides of this connection instead of passing it on.
    Cut,
    /// Pass these bytes instead (a whole packet).
    Replace(Vec<u8>),
    /// Do not pass it on; keep the connection.
    Drop,
    /// Pass it on after this long (the packets after it in this direction wait behind it).
    Delay(std::time::Duration),
}

/// Decides on each whole packet (fixed header included); shared by all connections.
pub type Rule = Arc<Mutex<dyn FnMut(Dir, &[u8]) -> Fault + Send>>;

/// A running proxy on a free loopback port.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
}

impl Proxy {
    /// Listens on a free loopback port and relays each connection to `broker_port`.
    pub fn start(broker_port: u16, rule: Rule) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for client in l.incoming() {
                let Ok(client) = client else { return };
                let Ok(broker) = TcpStream::connect(("127.0.0.1", broker_port)) else {
                    continue;
                };
                for (from, to, dir) in [
                    (client.try_clone(), broker.try_clone(), Dir::Up),
                    (broker.try_clone(), client.try_clone(), Dir::Down),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let rule = rule.clone();
                    std::thread::spawn(move || relay(from, to, dir, rule));
                }
            }
        });
        Proxy { port }
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

/// Copies whole packets from `from` to `to` until either side ends or the rule cuts.
fn relay(mut from: TcpStream, mut to: TcpStream, dir: Dir, rule: Rule) {
    while let Some(packet) = read_packet(&mut from) {
        let fault = (rule.lock().unwrap())(dir, &packet);
        let ok = match fault {
            Fault::Pass => to.write_all(&packet).is_ok(),
            Fault::Replace(b) => to.write_all(&b).is_ok(),
            Fault::Drop => true,
            Fault::Delay(d) => {
                std::thread::sleep(d);
                to.write_all(&packet).is_ok()
            }
            Fault::Cut => false,
        };
        if !ok {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// One MQTT packet: the fixed header byte, the Remaining Length varint and the rest.
fn read_packet(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut out = vec![0u8; 1];
    s.read_exact(&mut out).ok()?;
    let mut len = 0usize;
    for shift in [0, 7, 14, 21] {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).ok()?;
        out.push(b[0]);
        len |= usize::from(b[0] & 0x7f) << shift;
        if b[0] & 0x80 == 0 {
            let start = out.len();
            out.resize(start + len, 0);
            s.read_exact(&mut out[start..]).ok()?;
            return Some(out);
        }
    }
    None
}

/// `suback` with every reason code set to `code` (a broker refusing each filter). `v5`: the
/// packet carries MQTT 5 properties after the packet identifier.
pub fn refuse_suback(suback: &[u8], v5: bool, code: u8) -> Vec<u8> {
    let mut i = 1;
    while suback.get(i).is_some_and(|b| b & 0x80 != 0) {
        i += 1;
    }
    let mut start = i + 1 + 2; // past the Remaining Length and the packet identifier
    if v5 {
        // The property length (one byte while under 128) and the properties.
        start += 1 + usize::from(suback.get(start).copied().unwrap_or(0));
    }
    let mut out = suback.to_vec();
    for b in out.iter_mut().skip(start) {
        *b = code;
    }
    out
}

/// The packet type (the high nibble of the first byte): 3 PUBLISH, 8 SUBSCRIBE, 9 SUBACK.
pub fn packet_type(p: &[u8]) -> u8 {
    p.first().map_or(0, |b| b >> 4)
}

/// Whether `p` contains `needle`.
pub fn contains(p: &[u8], needle: &[u8]) -> bool {
    p.windows(needle.len()).any(|w| w == needle)
}
