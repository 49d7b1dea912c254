#pragma once
// Moved to the public API: include/sluice/status.h.
#include "sluice/status.h"
