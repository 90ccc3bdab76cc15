// The network resolver on its own: Host + path → network and API key, and its
// memos (the previous request's answer, then the recent-requests maps) never answer one request
// with another's network or key.

import { describe, expect, it } from 'vitest';
import { createNetworkResolver } from '../src/routing/network-resolver.js';

const resolver = createNetworkResolver([
  { baseUrl: '*/eth', network: 'eth-any-host' },
  { baseUrl: 'rpc.example.com/eth', network: 'eth-on-example' },
  { baseUrl: 'rpc.example.com:8545', network: 'example-port-8545' },
]);

const found = (network: string, apiKey: string) => ({ kind: 'found', value: { network, apiKey } });

describe('createNetworkResolver', () => {
  it('answers each request by its own host and path, however requests alternate', () => {
    const sequence: Array<[string | undefined, string, unknown]> = [
      ['127.0.0.1:8080', '/eth/v3/key-a', found('eth-any-host', 'key-a')],
      ['127.0.0.1:8080', '/eth/v3/key-a', found('eth-any-host', 'key-a')],
      ['RPC.example.com', '/eth/v3/key-a', found('eth-on-example', 'key-a')],
      ['127.0.0.1:8080', '/eth/v3/key-a', found('eth-any-host', 'key-a')],
      ['127.0.0.1:8080', '/eth/v3/key-b', found('eth-any-host', 'key-b')],
      ['rpc.example.com:8545', '/v3/key-b', found('example-port-8545', 'key-b')],
      ['rpc.example.com:9999', '/v3/key-b', { kind: 'not-found', reason: 'not found: expected POST {base_url}/v3/<API_KEY>' }],
      ['rpc.example.com:8545', '/v3/key-b', found('example-port-8545', 'key-b')],
      [undefined, '/eth/v3/key-b', found('eth-any-host', 'key-b')],
      ['127.0.0.1:8080', '/eth/v3', { kind: 'missing-key', network: 'eth-any-host' }],
      ['127.0.0.1:8080', '/eth/v3/key%2Dc', found('eth-any-host', 'key-c')],
    ];
    // Twice over, so the second pass is answered from the memos.
    for (const pass of [1, 2]) {
      for (const [host, path, expected] of sequence) {
        // Fresh strings, as every request's header strings are.
        const fresh = (text: string) => [...text].join('');
        expect(resolver.resolve(host === undefined ? undefined : fresh(host), fresh(path)), `pass ${pass}: ${host} ${path}`).toEqual(expected);
      }
    }
  });
});
