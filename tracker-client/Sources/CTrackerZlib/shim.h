#ifndef TRACKER_CTRACKERZLIB_SHIM_H
#define TRACKER_CTRACKERZLIB_SHIM_H
// zlib ships with every Apple SDK and with Debian's zlib1g-dev: gzip for TrackerClient's
// request bodies and CRC-32 for its queue records, without a package dependency.
#include <zlib.h>
#endif
