// PLACEHOLDER until the topology module lands.
#pragma once
