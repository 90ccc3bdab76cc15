import WebSocket from 'ws';
import * as wsModule from 'ws';

/**
 * The `ws` library's client and server classes. Its ES module entry exports the server class by
 * name only (`WebSocketServer`; the default export's `.Server` exists in the CommonJS entry
 * alone), and the type packages of ws 7 (still hoisted beside ws 8 by some dependencies) type it
 * as `WebSocket.Server`: one place reads it, typed the way both type versions agree on.
 */
export const WebSocketServer = (wsModule as unknown as { WebSocketServer: typeof WebSocket.Server }).WebSocketServer;
export type WebSocketServer = InstanceType<typeof WebSocket.Server>;
export { WebSocket };
