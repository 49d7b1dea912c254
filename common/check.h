#pragma once
// Moved to the public API: include/sluice/check.h.
#include "sluice/check.h"
