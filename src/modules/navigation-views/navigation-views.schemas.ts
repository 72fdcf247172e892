import Type from 'typebox';
import { badRequest } from '../../http/errors.js';
import { AUTHENTICATED_ERRORS, errorResponse, type RouteSchema, successResponse } from '../../http/openapi.js';
import { formParameters, jsonBoolean, kind, optional, pathSegment, required, trimmedText } from '../../http/params.js';
import { isStorableText } from '../../lib/text.js';

// The navigation view routes' parameters and documentation (docs/api.md §2.9, docs/api.md §3.8–§3.11); see
// src/http/params.ts and src/http/openapi.ts.

export const NavigationViewObject = Type.Object(
  {
    fragment: Type.String({ description: 'URL hash of the view; its identifier. May contain slashes.' }),
    is_pinned: Type.Boolean({ description: 'true: pinned; false: hidden in the menu.' }),
    name: Type.Union([Type.String(), Type.Null()], { description: 'Custom views only; null for built-in views.' }),
  },
  { description: 'A navigation view of the caller.' },
);

const withinLimit = trimmedText(500);

/** A trimmed, non-blank fragment or name of at most 500 characters that PostgreSQL text can store. */
const viewText = kind(withinLimit.schema, (raw, name) => {
  const value = withinLimit.decode(raw, name);
  if (!isStorableText(value)) throw badRequest(`${name} cannot contain NUL characters`);
  return value;
});

const NAME = 'Trimmed, non-blank, at most 500 characters. Custom views only.';
const IS_PINNED = 'Pin (true) or hide in the menu (false).';
/** The path's fragment: the router's percent-decoded rest of the path, used verbatim (docs/api.md §3.10). */
const FRAGMENT_PATH = {
  fragment: pathSegment(
    Type.String({ description: 'The rest of the path, percent-decoded and used verbatim (may contain `/`).' }),
    (segment) => segment,
    '*',
  ),
};

export const listNavigationViewsSchema = {
  operationId: 'get-navigation-views',
  summary: "Get the caller's navigation views",
  description: 'In creation order.',
  tags: ['navigation_views'],
  documentedResponses: {
    200: successResponse('The views.', { navigation_views: Type.Array(NavigationViewObject) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

export const addNavigationViewSchema = {
  operationId: 'add-navigation-view',
  summary: 'Add a navigation view',
  description: 'Built-in views take no name; custom views need one. Fragments and names are unique per user.',
  tags: ['navigation_views'],
  ...formParameters({
    fragment: required(viewText, 'Trimmed, non-blank, at most 500 characters.'),
    is_pinned: required(jsonBoolean, IS_PINNED),
    name: optional(viewText, NAME),
  }),
  documentedResponses: { 200: successResponse('The view was added.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const updateNavigationViewSchema = {
  operationId: 'edit-navigation-view',
  summary: 'Update a navigation view',
  description: 'Only the given fields change.',
  tags: ['navigation_views'],
  ...formParameters(
    {
      is_pinned: optional(jsonBoolean, IS_PINNED),
      name: optional(viewText, NAME),
    },
    FRAGMENT_PATH,
  ),
  documentedResponses: {
    200: successResponse('The view was updated.'),
    ...AUTHENTICATED_ERRORS,
    404: errorResponse('The caller has no view with this fragment (code NOT_FOUND).'),
  },
} satisfies RouteSchema;

export const removeNavigationViewSchema = {
  operationId: 'remove-navigation-view',
  summary: 'Remove a navigation view',
  tags: ['navigation_views'],
  ...formParameters({}, FRAGMENT_PATH),
  documentedResponses: {
    200: successResponse('The view was removed.'),
    ...AUTHENTICATED_ERRORS,
    404: errorResponse('The caller has no view with this fragment (code BAD_REQUEST).'),
  },
} satisfies RouteSchema;
