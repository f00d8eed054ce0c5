// The part of HBase's Thrift2 service (THBaseService) the HBase store uses for table
// administration that HBase's Thrift1 API (what happybase speaks) lacks: creating a table with
// split keys, truncating it while keeping its regions, and table/family settings.
// Written from the field ids of HBase 2.x's thrift2/hbase.thrift; only what we call is declared
// (Thrift ignores fields it does not know, so this stays wire-compatible).
namespace py hqueue_thrift.hbase_admin

struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}

enum TCompressionAlgorithm {
  LZO = 0,
  GZ = 1,
  NONE = 2,
  SNAPPY = 3,
  LZ4 = 4,
  BZIP2 = 5,
  ZSTD = 6
}

struct TColumnFamilyDescriptor {
  1: required binary name
  2: optional map<binary, binary> attributes
  3: optional map<string, string> configuration
  6: optional TCompressionAlgorithm compressionType
  10: optional i32 maxVersions
  13: optional i32 timeToLive
}

struct TTableDescriptor {
  1: required TTableName tableName
  2: optional list<TColumnFamilyDescriptor> columns
  3: optional map<binary, binary> attributes
}

struct TNamespaceDescriptor {
  1: required string name
  2: optional map<string, string> configuration
}

exception TIOError {
  1: optional string message
  2: optional bool canRetry
}

service THBaseService {
  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)
  bool tableExists(1: TTableName tableName) throws (1: TIOError io)
  void createTable(1: required TTableDescriptor desc, 2: optional list<binary> splitKeys)
    throws (1: TIOError io)
  void deleteTable(1: required TTableName tableName) throws (1: TIOError io)
  void truncateTable(1: required TTableName tableName, 2: required bool preserveSplits)
    throws (1: TIOError io)
  void enableTable(1: required TTableName tableName) throws (1: TIOError io)
  void disableTable(1: required TTableName tableName) throws (1: TIOError io)
  bool isTableEnabled(1: required TTableName tableName) throws (1: TIOError io)
  void createNamespace(1: required TNamespaceDescriptor namespaceDesc) throws (1: TIOError io)
  TNamespaceDescriptor getNamespaceDescriptor(1: required string name) throws (1: TIOError io)
}
