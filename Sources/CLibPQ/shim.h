#ifndef TRACKER_CLIBPQ_SHIM_H
#define TRACKER_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
