import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Starts `server` on `host:port`; rejects (and leaves it not listening) if the port is taken or refused. */
export function listen(server: Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** `http://host:port` a client on this machine can reach (a wildcard bind is reached over loopback). */
export function originOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const reachable = host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host;
  return `http://${reachable}:${address.port}`;
}

/** Stops accepting and resolves once every connection has ended; idle keep-alive connections are closed now. */
export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
