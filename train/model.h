#pragma once
// Moved to the public API: include/sluice/model.h.
#include "sluice/model.h"
