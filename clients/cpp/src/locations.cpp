// hqueue_locations: which gateway serves each partition of a queue (getQueueLocations), so a
// producer can send a partition's messages straight to its owner. One line per partition:
//   PARTITION <tab> HOST:PORT
#include "common.h"

namespace {

const char* USAGE = "[--host H] [--port P] [--timeout S] [--framed] [--compact] QUEUE";

int locate(const hqx::Options& o) {
  if (o.args.size() != 1) throw hqx::UsageError("expected one QUEUE argument");
  hqx::Gateway gw(o);
  std::vector<std::string> locations;
  gw->getQueueLocations(locations, o.args[0]);
  for (size_t pid = 0; pid < locations.size(); ++pid) {
    std::cout << pid << "\t" << locations[pid] << "\n";
  }
  return hqx::EXIT_OK;
}

}  // namespace

int main(int argc, char** argv) {
  return hqx::run("hqueue_locations", USAGE, argc, argv, "", locate);
}
