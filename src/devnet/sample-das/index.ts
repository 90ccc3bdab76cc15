/** Development fixture: the sample DAS upstream (`tollgate devnet`, tests, benchmarks; never `tollgate serve`). */
export {
  DEFAULT_SAMPLE_SEED,
  generateSampleDataset,
  type Asset,
  type AssetSortKeys,
  type Collection,
  type SampleDataset,
  type SampleDatasetOptions,
} from './dataset.js';
export { DEFAULT_LIMIT, createSampleDasIndex, queryAssetsByGroup, type AssetsByGroupResult, type SampleDasIndex } from './query.js';
export { startSampleDasServer, type SampleDasServer, type SampleDasServerOptions } from './server.js';
export { startSampleDasThread, type SampleDasThread } from './thread.js';
