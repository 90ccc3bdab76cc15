/** The `ws` library's client and server classes, imported in one place. */
export { default as WebSocket, WebSocketServer } from 'ws';
